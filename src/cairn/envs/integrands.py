"""Random integrands of the integration env and of LADDER's variants, by difficulty:
``generate_integrand(level, rng)``, level 1 polynomials, 2 products of exp/sin/cos,
3 substitutions u'(x) F(u(x)), 4 integration by parts and partial fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp

from cairn.envs._common import check_int_choices
from cairn.envs.antiderivative import x

__all__ = ["DEFAULT_TERMS", "LEVELS", "TERMS", "generate_integrand", "pick"]

LEVELS: tuple[int, ...] = (1, 2, 3, 4)
TERMS: tuple[int, ...] = (1, 2, 3, 4, 5, 6)  # a level-1 polynomial has distinct powers 0-5
DEFAULT_TERMS: tuple[int, ...] = (2, 3, 4)


def generate_integrand(
    level: int, rng: np.random.Generator | int, terms: Sequence[int] = DEFAULT_TERMS
) -> sp.Expr:
    """A random integrand in ``x`` of difficulty ``level`` (1-4); same rng state, same result.

    1: polynomial with a number of terms drawn uniformly from ``terms`` (1-6; default
    2-4), distinct powers 0-5 and coefficients in +-1..9; 2: constants times exp/sin/cos
    of ``a*x`` and products of two of them; 3: ``c * u'(x) * F(u(x))`` (substitution);
    4: ``x**k`` times exp/sin/cos/log or ``atan`` (by parts) and rational functions with
    distinct linear or irreducible quadratic factors (partial fractions).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {list(LEVELS)}, got {level!r}")
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    if level == 1:
        return _level1(rng, check_int_choices("terms", terms, TERMS))
    return _GENERATORS[level](rng)


def _int(rng: np.random.Generator, lo: int, hi: int, nonzero: bool = True) -> int:
    """A uniform int in [lo, hi], excluding 0 when ``nonzero``."""
    values = [v for v in range(lo, hi + 1) if v or not nonzero]
    return values[int(rng.integers(len(values)))]


def pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _level1(rng: np.random.Generator, terms: Sequence[int]) -> sp.Expr:
    powers = rng.choice(6, size=int(pick(rng, terms)), replace=False)
    return sp.Add(*(_int(rng, -9, 9) * x ** int(k) for k in powers))


def _trig_exp(rng: np.random.Generator) -> sp.Expr:
    return pick(rng, (sp.exp, sp.sin, sp.cos))(_int(rng, -3, 3) * x)


def _level2(rng: np.random.Generator) -> sp.Expr:
    terms = []
    for _ in range(int(rng.integers(1, 3))):
        factors = [_trig_exp(rng) for _ in range(int(rng.integers(1, 3)))]
        terms.append(_int(rng, -5, 5) * sp.Mul(*factors))
    return sp.Add(*terms)


def _level3(rng: np.random.Generator) -> sp.Expr:
    k, n = _int(rng, 1, 5), int(rng.integers(3, 6))  # n >= 3 keeps u**(n-1) a power
    inner = pick(rng, (x**2 + k, x**3 + k * x, sp.sin(x), sp.cos(x), sp.exp(x), 2 * x + k))
    outers = ("exp", "sin", "cos") + (("pow",) if inner != sp.exp(x) else ())
    outer = pick(rng, outers + (("inv",) if inner == x**2 + k else ()))
    u = sp.Dummy("u")
    F = {"exp": sp.exp(u), "sin": sp.sin(u), "cos": sp.cos(u), "pow": u**n, "inv": sp.log(u)}
    # the integrand is d/dx c*F(u(x)) = c*F'(u(x))*u'(x), so its antiderivative is c*F(u(x))
    dF = sp.diff(F[outer], u).subs(u, inner)
    return _int(rng, -4, 4) * dF * sp.diff(inner, x)


def _level4(rng: np.random.Generator) -> sp.Expr:
    c, a, b = _int(rng, -4, 4), _int(rng, -3, 3), _int(rng, -3, 3)
    kind = pick(rng, ("parts", "log", "atan", "fraction", "linear_fraction", "quadratic"))
    if kind == "parts":
        return c * x ** int(rng.integers(1, 4)) * _trig_exp(rng)
    if kind == "log":
        return c * x ** int(rng.integers(0, 3)) * sp.log(x)
    if kind == "atan":
        return c * x ** int(rng.integers(0, 2)) * sp.atan(x)
    if b == a:
        b = a + pick(rng, (-1, 1))
    if kind == "fraction":
        return c / ((x - a) * (x - b))
    if kind == "linear_fraction":
        return (c * x + _int(rng, -5, 5, nonzero=False)) / ((x - a) * (x - b))
    return c / (x**2 + a**2)


_GENERATORS = {2: _level2, 3: _level3, 4: _level4}
