"""Reading and checking an antiderivative, the verifier of the integration env (LADDER).

LADDER (arXiv 2503.00735, its numerical solution verifier) rewards an antiderivative by
comparing it numerically with the problem at random points in [-10, 10]; here the check is
``F'(x_i) == f(x_i)`` (relative tolerance) at sampled points ``x_i``, skipping points where
either side is complex or not finite, so a constant of integration is always allowed.

- ``parse_candidate(text)`` / ``parse_expression(text)``: a safe parser (allow-listed names
  only, bounded size, depth and exponents, no ``eval`` of arbitrary code);
  ``parse_bounded(text)``: the same within the time limit;
- ``verify_antiderivative(candidate_text, integrand) -> bool``: bounded in depth and (in
  the main thread) time, so any model output is answered, never raised.

``x`` is the real symbol every integrand and answer is written in.
"""

from __future__ import annotations

import inspect
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication,
    parse_expr,
    standard_transformations,
)

__all__ = ["parse_bounded", "parse_candidate", "parse_expression", "verify_antiderivative", "x"]

x = sp.Symbol("x", real=True)

# -- safe parsing ----------------------------------------------------------------------------
_FUNCTIONS: dict[str, Any] = {
    "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "cot": sp.cot, "sec": sp.sec, "csc": sp.csc,
    "asin": sp.asin, "acos": sp.acos, "atan": sp.atan, "acot": sp.acot,
    "arcsin": sp.asin, "arccos": sp.acos, "arctan": sp.atan,
    "sinh": sp.sinh, "cosh": sp.cosh, "tanh": sp.tanh,
    "asinh": sp.asinh, "acosh": sp.acosh, "atanh": sp.atanh,
    "exp": sp.exp, "log": sp.log, "ln": sp.log, "sqrt": sp.sqrt, "Abs": sp.Abs, "abs": sp.Abs,
}  # fmt: skip
_CONSTANT_OF_INTEGRATION = sp.Symbol("C")
_NAMES: dict[str, Any] = {
    **_FUNCTIONS, "x": x, "C": _CONSTANT_OF_INTEGRATION, "pi": sp.pi, "E": sp.E, "e": sp.E,
}  # fmt: skip
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)|([A-Za-z_]\w*)|(\*\*|[-+*/^()]))")
_TRANSFORMS = (*standard_transformations, implicit_multiplication, convert_xor)
_GLOBALS = ("Integer", "Float", "Rational", "Symbol", "Mul", "Add", "Pow")
_MAX_CHARS = 1000
_MAX_LITERAL_CHARS = 20
_MAX_NODES = 500
_MAX_CONSTANT_EXPONENT = 100
_MAX_DEPTH = 20  # nesting of the unevaluated tree (sympy's diff recurses once per level)
_MAX_PARENS = 40  # bracket nesting, checked before any parsing
_TIME_LIMIT_S = 2.0  # one check's wall-clock budget (main thread; see ``_time_limit``)
# sympy >= 1.13 can skip printing the expression into the generated function's docstring
_LAMBDIFY_OPTIONS = (
    {"docstring_limit": 0} if "docstring_limit" in inspect.signature(sp.lambdify).parameters else {}
)


def _check_tokens(text: str) -> None:
    """Raise ValueError unless ``text`` is numbers, allow-listed names, operators, parens."""
    pos = depth = 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"unexpected character {text[pos:].lstrip()[:1]!r}")
        number, name, op = match.groups()
        depth += (op == "(") - (op == ")")
        if depth > _MAX_PARENS:
            raise ValueError(f"parentheses nested deeper than {_MAX_PARENS}")
        if number is not None and len(number) > _MAX_LITERAL_CHARS:
            raise ValueError(f"number literal longer than {_MAX_LITERAL_CHARS} characters")
        if name is not None and name not in _NAMES:
            raise ValueError(
                f"unknown name {name!r}; allowed: x, C, pi, E, {', '.join(_FUNCTIONS)}"
            )
        pos = match.end()


def _check_tree(expr: sp.Basic) -> None:
    """Bound the size, constant exponents and constant powers of an unevaluated tree.

    Children come first in the traversal, so when a constant power is evaluated here its
    own base and exponent are already known to be small; this keeps sympy's exact integer
    arithmetic (``9**9**9``) and nested ``exp`` of constants from running away.
    """
    nodes = list(sp.postorder_traversal(expr))
    if len(nodes) > _MAX_NODES:
        raise ValueError(f"expression has more than {_MAX_NODES} nodes")
    if _depth(expr) > _MAX_DEPTH:
        raise ValueError(f"expression nested deeper than {_MAX_DEPTH} levels")
    for node in nodes:
        constant_exp = isinstance(node, sp.Pow) and not node.exp.free_symbols
        if constant_exp and not abs(complex(sp.N(node.exp, 15))) <= _MAX_CONSTANT_EXPONENT:
            raise ValueError(f"constant exponent larger than {_MAX_CONSTANT_EXPONENT}")
        constant = isinstance(node, sp.Pow | sp.exp) and not node.free_symbols
        if constant and not np.isfinite(complex(sp.N(node, 15))):
            raise ValueError("a constant power is infinite, undefined or too large")


def _depth(expr: sp.Basic) -> int:
    """Levels of the tree ``expr`` (a leaf: 1), without recursion."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((arg, level + 1) for arg in node.args)
    return deepest


def parse_candidate(text: str) -> sp.Expr:
    """Parse an antiderivative written in Python/sympy syntax (``^`` and ``2x`` accepted).

    Only ``x``, ``C`` (constant of integration, set to 0), ``pi``, ``E``/``e`` and the
    elementary functions in ``_FUNCTIONS`` are allowed. Raises ValueError otherwise, or when
    the text is longer than 1000 characters, has more than 500 nodes, is nested deeper than
    20 levels (40 for parentheses) or has a constant exponent above 100 in absolute value.
    """
    return parse_expression(text).subs(_CONSTANT_OF_INTEGRATION, 0)


def parse_expression(text: str) -> sp.Expr:
    """``text`` as a sympy expression through the safe parser of ``parse_candidate`` (the
    same allow-list and bounds; ``C`` stays a symbol). Never evaluates Python code."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty expression")
    if len(text) > _MAX_CHARS:
        raise ValueError(f"expression longer than {_MAX_CHARS} characters")
    _check_tokens(text)
    try:
        raw = _parse(text, evaluate=False)
        _check_tree(raw)
        expr = _parse(text, evaluate=True)
    except ValueError:
        raise
    except Exception as err:  # parse_expr raises many types (TokenError, SympifyError, ...)
        raise ValueError(f"cannot parse {text[:80]!r}: {type(err).__name__}") from err
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"{text[:80]!r} is not an expression")
    return expr


def _parse(text: str, evaluate: bool) -> sp.Basic:
    global_dict: dict[str, Any] = {name: getattr(sp, name) for name in _GLOBALS}
    global_dict["__builtins__"] = {}
    return parse_expr(
        text, local_dict=dict(_NAMES), global_dict=global_dict,
        transformations=_TRANSFORMS, evaluate=evaluate,
    )  # fmt: skip


# -- numeric verification ---------------------------------------------------------------------
def verify_antiderivative(
    candidate_text: str | sp.Expr,
    integrand: str | sp.Expr,
    *,
    points: int = 32,
    min_valid: int = 8,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    seed: int = 0,
    time_limit_s: float | None = _TIME_LIMIT_S,
) -> bool:
    """True when ``d/dx candidate == integrand`` at random points of [-10, 10].

    ``points`` abscissae are drawn from ``numpy.random.default_rng(seed)`` (deterministic);
    points where either side is complex, infinite or NaN are skipped, and at least
    ``min_valid`` must remain. Agreement: ``|F' - f| <= atol + rtol * max(|F'|, |f|)``.
    An unparseable candidate returns False (use ``parse_candidate`` to see why), and so does
    one whose check fails in sympy or (in the main thread) runs past ``time_limit_s``. A
    string integrand goes through the same safe parser (ValueError when it does not parse);
    no string is ever evaluated as Python.
    """
    f = _in_x(parse_expression(integrand) if isinstance(integrand, str) else integrand)
    try:
        with _time_limit(time_limit_s):
            candidate = (
                parse_candidate(candidate_text)
                if isinstance(candidate_text, str)
                else candidate_text
            )
            xs = _points(seed, points)  # (P,)
            lhs = _evaluate(sp.diff(_in_x(candidate), x), xs)  # (P,)
            rhs = _integrand_values(f, seed, points)  # (P,)
    except (ValueError, RecursionError, MemoryError, OverflowError, _CheckTimeout):
        return False
    ok = np.isfinite(lhs) & np.isfinite(rhs)
    if ok.sum() < min_valid:
        return False
    lhs, rhs = lhs[ok], rhs[ok]
    return bool(np.all(np.abs(lhs - rhs) <= atol + rtol * np.maximum(np.abs(lhs), np.abs(rhs))))


def parse_bounded(text: str) -> sp.Expr:
    """``parse_candidate`` within the time limit; a timeout or deep recursion in sympy is a
    ValueError like any other unparseable answer."""
    try:
        with _time_limit(_TIME_LIMIT_S):
            return parse_candidate(text)
    except (RecursionError, MemoryError, OverflowError, _CheckTimeout) as err:
        raise ValueError(f"cannot parse {text[:80]!r}: {type(err).__name__}") from err


class _CheckTimeout(Exception):
    """A check ran past its time limit."""


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``_CheckTimeout`` inside the block after ``seconds`` (SIGALRM timer).

    Signals reach only the main thread: elsewhere (env worker threads) the block runs
    unbounded in time and the structural bounds of ``parse_candidate`` are what hold.
    A timer already set by the caller is put back afterwards.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if seconds is None or not usable:
        yield
        return

    def _expire(signum: int, frame: Any) -> None:
        raise _CheckTimeout(f"check ran past {seconds} s")

    start, handler = time.monotonic(), signal.signal(signal.SIGALRM, _expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if outer > 0:  # the caller's timer, less the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


def _in_x(expr: sp.Expr) -> sp.Expr:
    """``expr`` with any symbol named ``x`` replaced by this module's real ``x``."""
    others = {s for s in expr.free_symbols if s.name != "x"}
    if others:
        raise ValueError(f"expression has symbols other than x: {sorted(map(str, others))}")
    return expr.subs({s: x for s in expr.free_symbols if s != x})


def _points(seed: int, points: int) -> np.ndarray:
    """The abscissae of a check: ``points`` uniform draws from [-10, 10], (P,)."""
    return np.random.default_rng(seed).uniform(-10.0, 10.0, size=points)


@lru_cache(maxsize=256)
def _integrand_values(f: sp.Expr, seed: int, points: int) -> np.ndarray:
    """``f`` at the check's points, (P,); cached because an env checks one f many times."""
    values = _evaluate(f, _points(seed, points))
    values.flags.writeable = False
    return values


def _evaluate(expr: sp.Expr, xs: np.ndarray) -> np.ndarray:
    """``expr`` at the real points ``xs`` (P,) as floats; NaN where complex or undefined."""
    with np.errstate(all="ignore"):
        try:
            func = sp.lambdify(x, expr, modules="numpy", **_LAMBDIFY_OPTIONS)
            values = np.asarray(func(xs), dtype=complex)
        except Exception:  # unprintable or non-numeric expressions count as undefined
            return np.full(xs.shape, np.nan)
    values = np.broadcast_to(values, xs.shape)
    real = values.real.astype(float)
    real[np.abs(values.imag) > 1e-12 * np.maximum(1.0, np.abs(values.real))] = np.nan
    return real
