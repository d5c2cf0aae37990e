"""The Python API: ``cairn.train(config, callbacks=[...])``, and the example script that
uses it (examples/train_from_python.py), run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import cairn
from cairn.train import Config, ConfigError
from cairn.train.api import Callback, TrainResult, resolve
from cairn.train.presets import preset_text

ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "rollout": {"groups": 2, "group_size": 2},
    "train": {"iterations": 2, "time_budget_s": None, "threads": 1},
    "eval": {"episodes": 2, "every": 2},
    "log": {"progress": False},
}


def _tiny(tmp_path: Path) -> dict:
    """The tiny dataset preset (built-in arithmetic set) as a dict, two small iterations."""
    data = yaml.safe_load(preset_text("dataset_grpo"))
    for key, value in SMALL.items():
        data[key] = {**data.get(key, {}), **value}
    return {**data, "out_dir": str(tmp_path / "runs")}


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_train_start(self, trainer) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("start", trainer.dir))

    def on_iteration(self, metrics: dict) -> None:
        self.events.append(("iteration", metrics["iteration"]))

    def on_train_end(self, summary: dict) -> None:
        self.events.append(("end", summary["iterations"]))


def test_train_from_a_dict_with_callbacks(tmp_path: Path) -> None:
    recorder, rows = Recorder(), []
    config = _tiny(tmp_path)
    result = cairn.train(config, callbacks=[recorder, rows.append])  # a function: on_iteration
    assert isinstance(result, TrainResult) and result.run_dir.is_dir()
    assert result.run_dir.parent == tmp_path / "runs"
    assert recorder.events == [("start", result.run_dir), ("iteration", 1), ("iteration", 2),
                               ("end", 2)]  # fmt: skip
    on_disk = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == on_disk  # the callbacks see what metrics.jsonl gets
    assert "eval/success" in rows[1] and "eval/success" not in rows[0]  # eval.every=2
    assert json.loads((result.run_dir / "summary.json").read_text()) == result.summary
    assert config["out_dir"] == str(tmp_path / "runs")  # the caller's dict is not changed


def test_a_config_a_path_and_a_preset_name_resolve_alike(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(preset_text("dataset_grpo"))
    by_name = resolve("dataset_grpo", ["train.iterations=3"])
    assert by_name == resolve(path, ["train.iterations=3"]) == resolve(by_name)
    assert by_name.train.iterations == 3
    as_dict = resolve(yaml.safe_load(preset_text("dataset_grpo")), ["train.iterations=3"])
    assert as_dict == by_name
    assert isinstance(by_name, Config)


def test_bad_configs_fail_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        cairn.train({"rollout": {"group_size": "many"}, "out_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="not a Config"):
        cairn.train(Config(), overrides=["seed=1"])
    with pytest.raises(TypeError, match="config must be a Config, a dict, a path"):
        cairn.train(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a callback has on_iteration"):
        cairn.train(Config(), callbacks=[object()])
    assert not any(tmp_path.iterdir())  # nothing was written


def test_cairn_train_is_the_api_function() -> None:
    assert callable(cairn.train) and cairn.train.run is not None
    assert cairn.train.Callback is Callback


def test_the_example_script_trains_as_a_user_runs_it(tmp_path: Path) -> None:
    sets = [
        f"{k}.{kk}={'null' if v is None else v}" for k, d in SMALL.items() for kk, v in d.items()
    ]
    argv = [sys.executable, str(ROOT / "examples" / "train_from_python.py"), "--out", str(tmp_path)]
    for s in sets:
        argv += ["--set", s]
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "iteration 1: success" in out.stdout and "iteration 2: success" in out.stdout
    assert "held-out success" in out.stdout
    run = Path(out.stdout.strip().splitlines()[-1].removeprefix("run folder: "))
    assert json.loads((run / "summary.json").read_text())["iterations"] == 2
    assert (tmp_path / "arith.jsonl").is_file()
