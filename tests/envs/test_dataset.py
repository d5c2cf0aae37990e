"""The dataset task: prompts from a local file, a reward function by import path (TRL's
signature), single- and multi-turn; clear one-line errors; training from a generated file."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cairn.envs import make
from cairn.envs.dataset import arithmetic_rows, load_rows
from cairn.envs.testing import check_env

REWARDS = '''
def correct(prompts, completions, answer, **columns):
    """TRL's shape: one float per completion."""
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

def half(prompts, completions, **columns):
    return [0.5 for _ in completions]

def two(prompts, completions, **columns):
    return [1.0, 0.0]

def words(prompts, completions, **columns):
    return ["yes" for _ in completions]

def hint(prompts, completions, answer, **columns):
    """A tool answering a wrong answer: higher or lower."""
    return ["higher" if int(c) < int(a) else "lower" for c, a in zip(completions, answer)]
'''


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A generated arithmetic JSONL and a reward module on the path, as a user has them."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_rows(64, seed=1)))
    return path


def test_single_turn_scores_with_the_named_reward(user: Path) -> None:
    env = make("dataset", path=str(user), reward="my_rewards:correct")
    obs, info = env.reset(seed=5)
    row = arithmetic_rows(64, seed=1)[5]
    assert obs == row["prompt"] and info["answer"] == row["answer"]
    _, reward, term, trunc, info = env.step(row["answer"])
    assert (reward, term, trunc, info["success"], info["valid"]) == (1.0, True, False, True, True)
    env.reset(seed=5)
    _, reward, term, _, info = env.step("-1")  # wrong: 0, and single-turn ends
    assert (reward, term, info["success"]) == (0.0, True, False)


def test_multi_turn_feedback_comes_from_the_tool(user: Path) -> None:
    env = make(
        "dataset", path=str(user), reward="my_rewards:correct", feedback="my_rewards:hint",
        max_turns=3, answer_pattern=r"-?\d+",
    )  # fmt: skip
    obs, _ = env.reset(seed=0)
    answer = int(arithmetic_rows(64, seed=1)[0]["answer"])
    obs, reward, term, trunc, info = env.step(str(answer - 1))
    assert obs.endswith("\nhigher") and (reward, term, trunc) == (0.0, False, False)
    obs, _, _, _, info = env.step("x")  # invalid: state unchanged, tool not called
    assert info["valid"] is False and obs.endswith("\nhigher")
    _, reward, term, _, info = env.step(str(answer))
    assert (reward, term, info["success"]) == (1.0, True, True)


def test_default_feedback_names_the_reward_and_the_episode_truncates(user: Path) -> None:
    env = make("dataset", path=str(user), reward="my_rewards:half", max_turns=2)
    env.reset(seed=0)
    obs, reward, term, _, _ = env.step("3")
    assert reward == 0.5 and not term and "scored 0.5" in obs
    _, _, term, trunc, info = env.step("4")
    assert term and not trunc and info["success"] is False  # the last answer ends it


@pytest.mark.parametrize("max_turns", [1, 3])
def test_the_dataset_env_passes_check_env(user: Path, max_turns: int) -> None:
    options = {"path": str(user), "reward": "my_rewards:correct", "max_turns": max_turns}
    check_env("dataset", invalid_keeps_anchor=True, **options)
    check_env("dataset")  # the built-in arithmetic set and exact_match


def test_csv_parquet_json_and_a_saved_dataset_read_the_same_rows(tmp_path: Path) -> None:
    rows = arithmetic_rows(10)
    with (tmp_path / "a.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "a.json").write_text(json.dumps(rows))
    assert load_rows(tmp_path / "a.csv") == rows == load_rows(tmp_path / "a.json")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    assert load_rows(tmp_path / "a.parquet") == rows
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(
        str(tmp_path / "saved")
    )
    assert load_rows(tmp_path / "saved") == rows
    with pytest.raises(ValueError, match="has no split 'test'; splits: train"):
        load_rows(tmp_path / "saved", split="test")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"path": "{tmp}/missing.jsonl"}, "dataset file '.*missing.jsonl' does not exist"),
        ({"prompt_column": "question"}, "prompt column 'question' is not in .*; columns: "
                                        "prompt, answer"),
        ({"reward": "my_rewards:two"}, "reward function 'my_rewards:two' returned 2 values "
                                       "for 1 completion"),
        ({"reward": "my_rewards:words"}, "reward function 'my_rewards:words' returned 'yes' "
                                         "\\(str\\), want a float"),
        ({"reward": "my_rewards"}, "must be an import path 'module:function'"),
        ({"reward": "nowhere_mod:f"}, "cannot import 'nowhere_mod'"),
        ({"reward": "my_rewards:absent"}, "module 'my_rewards' has no 'absent'"),
        ({"path": "{tmp}/bad.txt"}, "unknown format '.txt'"),
        ({"path": "{tmp}/broken.jsonl"}, "line 2: not JSON"),
        ({"max_turns": 0}, "max_turns must be an int >= 1"),
    ],
)  # fmt: skip
def test_clear_errors(user: Path, options: dict, message: str) -> None:
    tmp = user.parent
    (tmp / "bad.txt").write_text("x")
    (tmp / "broken.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    opts = {"path": str(user), **{k: str(v).format(tmp=tmp) for k, v in options.items()}}
    if "max_turns" in options:
        opts["max_turns"] = options["max_turns"]
    with pytest.raises(ValueError, match=message) as err:
        make("dataset", **opts)
    assert "\n" not in str(err.value)


def test_a_bad_reward_function_is_a_one_line_config_error(user: Path, capsys) -> None:
    from cairn.cli import main

    # `cairn train` runs the preflight before any work (`cairn config` only prints data)
    rc = main(["train", "dataset_grpo", "--set", f"env.options.path={user}",
               "--set", "env.options.reward=my_rewards:two",
               "--set", f"out_dir={user.parent / 'runs'}"])  # fmt: skip
    out = capsys.readouterr()
    lines = [x for x in (out.out + out.err).splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert "returned 2 values for 1 completion" in lines[0]


def test_trains_two_iterations_from_a_generated_jsonl(tmp_path: Path) -> None:
    """The README's path, through the command line: a JSONL the test writes, a reward
    module in tmp put on PYTHONPATH, the tiny-model preset, two iterations."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_rows(64)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    sets = [
        f"env.options.path={data}", "env.options.reward=my_rewards:correct",
        "train.iterations=2", "train.time_budget_s=null", "rollout.groups=2",
        "rollout.group_size=2", "eval.episodes=2", "eval.every=2", "train.threads=1",
        "log.progress=false", f"out_dir={tmp_path / 'runs'}", "name=arith",
    ]  # fmt: skip
    argv = [sys.executable, "-m", "cairn.cli", "train", "dataset_grpo"]
    for s in sets:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["episodes"] == 8
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(0.0 <= r["rollout/success"] <= 1.0 for r in rows)
