"""Garbage in, one clear answer out: a fast, seeded subset of
``benchmarks/faults/faults.py``. Fuzzed actions never raise out of ``env.step`` and answer
``valid=False``; fuzzed ``--set`` keys and values, malformed YAML files and bad paths end
in one line, a non-zero exit, no traceback and no run folder."""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import string

import pytest

from cairn.cli import main
from cairn.envs import available, env_class, env_traits, make
from cairn.train.schema import describe

#: Every registered env, from the registry; the ones registered ``slow=True`` (a process to
#: start, games to generate) are slow tests (the benchmark fuzzes every built-in env too).
REGISTERED = [
    pytest.param(n, marks=[pytest.mark.slow] if env_traits(n).get("slow") else [])
    for n in available()
]


def garbage(rng: random.Random) -> str:
    """Random printable text, a long run, unicode, deep nesting or a JSON fragment."""
    kind = rng.randrange(5)
    if kind == 0:
        return "".join(rng.choices(string.printable, k=rng.randint(0, 40)))
    if kind == 1:
        return rng.choice(["a", "(", "9", "\u00e9"]) * rng.randint(1_000, 5_000)
    if kind == 2:
        return "".join(chr(rng.randint(0x80, 0x2FFFF)) for _ in range(rng.randint(1, 20)))
    if kind == 3:
        depth = rng.randint(30, 300)  # deeper than any checker's bound
        return rng.choice(["(", "[", "{", "cos("]) * depth + "x" + ")" * depth
    return "".join(rng.choices(['{"a": ', "[1,", "null", "{]", '"\\u0000"'], k=3))


@pytest.mark.parametrize("name", REGISTERED)
def test_fuzzed_actions_answer_invalid_and_never_raise(name):
    try:
        env_class(name)
    except ImportError as err:
        pytest.skip(f"{name}: optional extra not installed ({err})")
    rng, env = random.Random(name), make(name)
    free_text = env_traits(name).get("free_text", False)  # e.g. the dataset env's answers
    done, seen = True, 0
    for i in range(150):
        if done:
            env.reset(seed=i)
        action = garbage(rng)
        _, _, terminated, truncated, info = env.step(action)  # must not raise
        if free_text:  # any short printable answer may be valid: a bool, never a raise
            assert isinstance(info["valid"], bool), (name, action[:40])
        else:
            assert info["valid"] is False, (name, action[:40])
        done, seen = terminated or truncated, seen + 1
    assert seen == 150


@pytest.mark.slow  # starts a JVM (about 10 s)
def test_a_lone_surrogate_is_an_invalid_scienceworld_action():
    """Py4J encodes UTF-8, where a lone surrogate raised (and broke the JVM connection)."""
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None:
        pytest.skip("scienceworld needs java")
    env = make("scienceworld")
    try:
        env.reset(seed=0)
        assert env.step("\ud821open door")[4]["valid"] is False
        assert env.step("look around")[4]["valid"] is True  # the connection still works
    finally:
        env.close()


BAD_VALUES = ["abc", "[1, 2", "{a: 1", "-7", "1e999", "[]", "{}", "'", ": :", "*a", "[[[["]


def _cli(argv: list[str]) -> tuple[int, list[str]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = main(argv)
    return rc, [x for x in buf.getvalue().splitlines() if x.strip()]


def _fuzzed_sets(n: int) -> list[str]:
    """Random keys, and known keys given a value of the wrong type or malformed YAML."""
    rng = random.Random(0)
    keys = [k for k, _, _ in describe() if not k.startswith(("name", "out_dir"))]
    out = []
    for i in range(n):
        key = rng.choice(keys) if i % 3 else "".join(rng.choices("abcxyz._", k=8)).strip(".")
        out.append(f"{key or 'q'}={rng.choice(BAD_VALUES)}")
    return out


@pytest.mark.parametrize("item", _fuzzed_sets(60))
def test_a_fuzzed_set_is_rejected_in_one_line_or_loads(item, tmp_path):
    rc, lines = _cli(["config", "--set", item])
    if rc == 0:  # a wrong-looking value that is valid for its key (e.g. -7 where allowed)
        return
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), (item, lines)
    rc, lines = _cli(["train", "--set", item, "--set", f"out_dir={tmp_path / 'out'}"])
    assert rc == 2 and len(lines) == 1 and "Traceback" not in lines[0], (item, lines)
    assert not (tmp_path / "out").exists()


MALFORMED_YAML = [
    "rollout: [1, 2",
    "train:\n  iterations: {\n",
    "- a\n- b\n",
    "env:\n\tname: sokoban\n",
    "rollout:\n  groups: many\n",
    "foo: 1\n",
    "\x00\x01\x02",
    "env: sokoban\n",
    "optim: {lr: -1}\n",
    "rollout: {groups: 2}\nO\nx: [",
]


@pytest.mark.parametrize("text", [*MALFORMED_YAML, "rollout: {groups: 2}\n\xf4\x94"])
def test_a_malformed_config_file_is_one_line_and_no_folder(text, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text.encode("latin-1"))  # the last one is not UTF-8
    rc, lines = _cli(["train", str(path), "--set", f"out_dir={tmp_path / 'out'}"])
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "{tmp}/missing.yaml"],
        ["train", "{tmp}"],
        ["train", "--resume", "{tmp}/nowhere"],
        ["train", "--resume", "{tmp}"],
        ["eval", "{tmp}/nowhere"],
        ["inspect", "{tmp}/nowhere"],
    ],
)
def test_a_bad_path_is_one_line(argv, tmp_path):
    before = sorted(tmp_path.iterdir())
    rc, lines = _cli([a.format(tmp=tmp_path) for a in argv])
    assert rc != 0 and len(lines) == 1 and "Traceback" not in lines[0], lines
    assert sorted(tmp_path.iterdir()) == before
