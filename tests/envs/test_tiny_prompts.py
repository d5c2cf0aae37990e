"""The tiny presets' prompts are pinned: their recorded numbers were measured on these words.

For one seed of each built-in env a tiny preset uses (its options read from the preset
file), the instruction, the first observation, the observation after one action and a
digest of the vocabulary (the local tokenizer is trained on it) are typed in as they were
before real-model prompts were added. Adding renderings, instructions or generator options
for language models must leave every one of them byte-identical.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from cairn.envs import make

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

PINS = [
    (  # seed 0 draws a target that is the sum of all the numbers: the preset allows it
        "countdown_gigpo",
        0,
        "11 + 18 + 1",
        "Using the numbers 18, 1, 11, write an arithmetic expression that equals 30. You may "
        "use + - * / and parentheses, and each number at most once. Answer with the "
        "expression only.",
        "numbers 18 1 11 target 30",
        "numbers 18 1 11 target 30 last correct",
        "80e9f0b6c5c6b9d846b74d0726ce5ad2ba9d2c655f6932e11481da009159965e",
    ),
    (
        "countdown_step_grpo",
        3,
        "5 + 4 - 2 + 4",
        "Using the numbers 2, 4, 5, 4, write an arithmetic expression that equals 11. You may "
        "use + - * / and parentheses, and each number at most once. Answer with the "
        "expression only.",
        "numbers 2 4 5 4 target 11",
        "numbers 2 4 5 4 target 11 last correct",
        "80e9f0b6c5c6b9d846b74d0726ce5ad2ba9d2c655f6932e11481da009159965e",
    ),
    (
        "sokoban_grpo",
        3,
        "right",
        "push the box onto the goal",
        "pu:wall pd:free pl:free pr:free pul:wall pur:wall pdl:free pdr:wall r+2 c+1 tr+0 "
        "tc-1 bu:wall bd:wall bl:free br:free bul:free bur:free bdl:free bdr:wall",
        "pu:wall pd:wall pl:free pr:free pul:wall pur:wall pdl:free pdr:free r+2 c+0 tr+0 "
        "tc-1 bu:wall bd:wall bl:free br:free bul:free bur:free bdl:free bdr:wall",
        "faf2d0a958fe9b620dc22649c8471879af119b2066c39191e6ffcf321aabc48a",
    ),
    (
        "search_qa_gigpo",
        3,
        "search [ Kabelfen works for ]",
        "Answer the question by searching a collection of short documents. Write "
        "search[query] to see the 3 best matching documents, or answer[text] to give your "
        "final answer, which ends the episode. Question: who is the founder of the employer "
        "of Kabelfen ?",
        "who is the founder of the employer of Kabelfen ?",
        "[1] Kabelfen works for Karon\n[2] Kabelfen was born in Torbel\n"
        "[3] Ronsator works for Polbelron",
        "b7e9c33146fc7f0aeafe912637f69cc1a5801354965adfca9db283324c8687f1",
    ),
    (
        "frozenlake_gigpo",
        3,
        "down",
        "You are on a frozen lake drawn as a grid: S is the start, F is frozen ice (safe), "
        "H is a hole (stepping into it ends the episode), G is the goal and A is you. Reach "
        "G without stepping into a hole. Answer with one action: left, down, right or up. "
        "The observation gives your position (row, column), the cell on each side of you "
        "(wall past the edge of the map) and how many rows and columns away the goal is.",
        "pos 0 0 left wall down F right F up wall goal 3 down 3 right",
        "pos 1 0 left wall down F right H up S goal 2 down 3 right",
        "6c77d98d49203ab7a814b83f317768869d31e6440b5e394ef3add15b339fed9b",
    ),
    (
        "integration_gigpo",
        3,
        "x",
        "Find an antiderivative F(x) of f(x) = -2*x**5 - 8*x**3 - 4*x - 9, that is a "
        "function with F'(x) = f(x). Write F(x) in Python syntax, e.g. x**2/2 + sin(x) + "
        "log(x); the constant of integration may be omitted. Answer with the expression only.",
        "integrand -2*x**5 - 8*x**3 - 4*x - 9",
        "integrand -2*x**5 - 8*x**3 - 4*x - 9 | last wrong",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # empty: open
    ),
]


@pytest.mark.parametrize(
    ("preset", "seed", "action", "instruction", "obs", "after", "vocab"),
    PINS,
    ids=[p[0] for p in PINS],
)
def test_tiny_preset_prompts_are_byte_identical(
    preset, seed, action, instruction, obs, after, vocab
):
    env_cfg = yaml.safe_load((CONFIGS / f"{preset}.yaml").read_text())["env"]
    env = make(env_cfg["name"], **env_cfg.get("options", {}))
    first, _ = env.reset(seed=seed)
    assert (env.instruction, first) == (instruction, obs)
    assert env.step(action)[0] == after
    assert hashlib.sha256("\n".join(env.vocabulary()).encode()).hexdigest() == vocab
