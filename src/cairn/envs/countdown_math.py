"""The arithmetic of countdown: drawing solvable instances, checking answers exactly, and
the key steps and closeness its rewards read. ``cairn.envs.countdown.Countdown`` is the env.

Instances are generated so that a solution exists (``generate_countdown``): the seed draws
the numbers, then combines all of them in a random order with random operations whose
intermediate values stay positive integers (Countdown's rule), and the final value becomes
the target, that expression the solution. Answers are checked exactly
(``evaluate_expression``): the expression is parsed with ``ast`` (only integer literals,
``+ - * /`` and parentheses are accepted), evaluated with ``fractions.Fraction`` (so
fractional or negative intermediate values are fine in answers), and its literals must
form a sub-multiset of the given numbers (``use_all``: exactly the given numbers).

Answers as language models write them (``read_answer``): a leading ``Answer:``, surrounding
backticks or ``$``, a final period, ``×``/``÷`` for ``*``/``/`` and a trailing
``= 302`` are accepted; the stated value must equal the expression's value (``1 + 4 + 3 =
9`` is invalid).

``key_steps``: the intermediate equations of a solution (Step-GRPO's StepRAR reward matches
them in an answer); ``is_trivial``: a target that is the sum or the product of all the
numbers; ``closeness``: how near a value is to the target.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from fractions import Fraction

import numpy as np

__all__ = [
    "OPS",
    "closeness",
    "evaluate_expression",
    "generate_countdown",
    "is_trivial",
    "key_steps",
    "read_answer",
]

OPS = ("+", "-", "*", "/")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_MAX_EXPR_CHARS = 500
_ANSWER_PREFIX = re.compile(r"^(?:final\s+)?answer\s*(?::|is\b:?)\s*", re.IGNORECASE)
_STATED = re.compile(r"^(.*?)=\s*(-?\d+)\s*$", re.DOTALL)
_SYMBOLS = str.maketrans({"\u00d7": "*", "\u00f7": "/", "\u2212": "-"})


def generate_countdown(
    rng: np.random.Generator,
    count: tuple[int, int] = (3, 6),
    number_range: tuple[int, int] = (1, 100),
    target_range: tuple[int, int] = (1, 999),
    max_tries: int = 10_000,
    allow_trivial: bool = True,
) -> tuple[list[int], int, str]:
    """Draw ``(numbers, target, solution)`` with ``solution`` using every number once.

    Intermediate values stay positive integers; instances whose target falls outside
    ``target_range``, or (``allow_trivial=False``) is the sum or the product of all the
    numbers, are redrawn (ValueError after ``max_tries`` draws).
    """
    for _ in range(max_tries):
        n = int(rng.integers(count[0], count[1] + 1))
        numbers = [int(v) for v in rng.integers(number_range[0], number_range[1] + 1, size=n)]
        built = _random_expression(numbers, rng)
        if built is None or not target_range[0] <= built[0] <= target_range[1]:
            continue
        if allow_trivial or not is_trivial(numbers, built[0]):
            return numbers, built[0], built[1]
    raise ValueError(
        f"no countdown instance with count={count}, number_range={number_range} reaches "
        f"target_range={target_range} in {max_tries} draws"
        + ("" if allow_trivial else " without a trivial target")
        + "; widen target_range"
    )


def is_trivial(numbers: list[int], target: int) -> bool:
    """True when ``target`` is the sum or the product of all of ``numbers`` (a shortcut)."""
    return target in (sum(numbers), math.prod(numbers))


def closeness(value: Fraction | int, target: int) -> float:
    """``max(0, 1 - |value - target| / target)``: 1 at the target, 0 at 0 or 2 x target."""
    return max(0.0, 1.0 - abs(float(value) - target) / target)


def _random_expression(numbers: list[int], rng: np.random.Generator) -> tuple[int, str] | None:
    """Combine random pairs until one value is left; None if no operation keeps it positive."""
    # pool items: (value, text, precedence of the top operator; 3 for a bare number)
    pool = [(v, str(v), 3) for v in numbers]
    while len(pool) > 1:
        i, j = (int(k) for k in rng.choice(len(pool), size=2, replace=False))
        a, b = pool[i], pool[j]
        ops = [op for op in OPS if _apply_int(a[0], b[0], op) is not None]
        if not ops:
            return None
        op = ops[int(rng.integers(len(ops)))]
        value = _apply_int(a[0], b[0], op)
        assert value is not None  # op was kept because it gives a value
        merged = (value, _join(a, b, op), _PRECEDENCE[op])
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [merged]
    return pool[0][0], pool[0][1]


def _apply_int(a: int, b: int, op: str) -> int | None:
    """``a op b`` if it is a positive integer, else None."""
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "-":
        return a - b if a > b else None
    return a // b if a % b == 0 else None


def _join(a: tuple[int, str, int], b: tuple[int, str, int], op: str) -> str:
    """``a op b`` as text with the fewest parentheses, tokens separated by spaces."""
    left = a[1] if a[2] >= _PRECEDENCE[op] else f"( {a[1]} )"
    # the right operand of - and / also needs parentheses at equal precedence
    tight = _PRECEDENCE[op] + (1 if op in "-/" else 0)
    right = b[1] if b[2] >= tight else f"( {b[1]} )"
    return f"{left} {op} {right}"


def evaluate_expression(text: str, numbers: list[int], use_all: bool = False) -> Fraction | None:
    """The exact value of ``text``, or None if it is not a valid answer over ``numbers``.

    Valid: integer literals, ``+ - * /`` and parentheses only, no division by zero, and the
    literals form a sub-multiset of ``numbers`` (each given number used at most once;
    ``use_all``: the literals are exactly ``numbers``, each used once).
    """
    if not isinstance(text, str) or not text.strip() or len(text) > _MAX_EXPR_CHARS:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    used: list[int] = []
    try:
        value = _eval_node(tree.body, used)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None
    if use_all:
        return value if Counter(used) == Counter(numbers) else None
    return value if not Counter(used) - Counter(numbers) else None


def read_answer(text: str, numbers: list[int], use_all: bool = False) -> Fraction | None:
    """The value of an answer as a language model writes it, or None if it is invalid.

    Around one expression (``evaluate_expression``) it allows a leading ``Answer:``,
    surrounding backticks or ``$``, a final period, ``×``/``÷``/``−`` for ``* / -`` and a
    trailing ``= N``, which must state the expression's value: ``1 + 4 + 3 = 8`` is 8,
    ``1 + 4 + 3 = 9`` is invalid. ``use_all``: as in ``evaluate_expression``.
    """
    if not isinstance(text, str) or len(text) > _MAX_EXPR_CHARS:
        return None
    body = _strip_decoration(text.translate(_SYMBOLS))
    stated = _STATED.match(body)
    if stated is not None:
        body = _strip_decoration(stated.group(1))
    value = evaluate_expression(body, numbers, use_all)
    if value is None or (stated is not None and value != int(stated.group(2))):
        return None
    return value


def _strip_decoration(text: str) -> str:
    """``text`` without a leading ``Answer:``, wrapping backticks or ``$`` and a final period."""
    text = _ANSWER_PREFIX.sub("", text.strip()).strip()
    text = text.removesuffix(".").strip()
    for mark in ("```", "`", "$$", "$"):
        if len(text) > 2 * len(mark) and text.startswith(mark) and text.endswith(mark):
            text = text[len(mark) : -len(mark)].strip()
    return text.removesuffix(".").strip()


def _eval_node(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        left, right = _eval_node(node.left, used), _eval_node(node.right, used)
        op = _AST_OPS[type(node.op)]
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        return left * right if op == "*" else left / right
    raise ValueError(f"disallowed syntax: {type(node).__name__}")


def key_steps(solution: str) -> list[list[str]]:
    """The intermediate equations of ``solution``: Step-GRPO's key steps (StepRAR).

    Every operation of the expression as parsed, innermost first, except the last one
    (the whole answer), written as the generator writes sub-expressions (``( 25 - 3 ) * 7``);
    ``+`` and ``*`` steps also accept their operands swapped. Matching a phrase inside an
    answer means the answer computes that intermediate value the same way (StepRAR's soft
    match is a substring test, so ``3 + 6`` also matches inside ``13 + 6``).
    """
    steps: list[list[str]] = []

    def walk(node: ast.AST) -> tuple[int, str, int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return 0, str(node.value), 3
        if not (isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS):
            raise ValueError(f"key_steps: not a countdown expression: {solution!r}")
        a, b, op = walk(node.left), walk(node.right), _AST_OPS[type(node.op)]
        text = _join(a, b, op)
        swapped = _join(b, a, op) if op in "+*" else text
        steps.append([text] if swapped == text else [text, swapped])
        return 0, text, _PRECEDENCE[op]

    try:
        tree = ast.parse(solution.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"key_steps: not a countdown expression: {solution!r}") from err
    walk(tree.body)
    return steps[:-1]
