"""Metric loggers: each optional backend when installed, and failures that never stop a run."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from cairn._errors import ConfigError
from cairn.train.config import load_config
from cairn.train.loggers import LoggerSet, LoggerWarning, available_loggers, scalars
from cairn.train.runlog import RunLog

ROWS = [
    {"iteration": 1, "episodes": 8, "rollout/success": 0.25, "actor/kl": 0.01, "note": "x"},
    {"iteration": 2, "episodes": 16, "rollout/success": 0.5, "actor/kl": None},
]


def test_scalars_keep_finite_numbers_only():
    import numpy as np

    row = {"a": 1, "b": True, "c": np.float32(0.5), "d": float("nan"), "e": "s", "f": None}
    assert scalars(row) == {"a": 1.0, "b": 1.0, "c": 0.5}


class Recorder:
    def __init__(self, run_dir, config):
        self.rows, self.closed = [], False

    def log(self, row, step):
        self.rows.append((step, row))

    def close(self):
        self.closed = True


class FailsAtStart:
    def __init__(self, run_dir, config):
        raise ImportError("No module named 'nothing_here'")


def test_a_failing_logger_is_warned_about_once_and_the_others_go_on(tmp_path):
    from cairn.train.loggers import register_logger

    register_logger("recorder_for_tests", Recorder)
    register_logger("fails_at_start_for_tests", FailsAtStart)
    said = []
    with pytest.warns(LoggerWarning) as caught:
        loggers = LoggerSet(
            ["jsonl", "recorder_for_tests", "broken_for_tests", "fails_at_start_for_tests"],
            tmp_path,
            say=said.append,
        )
        for row in ROWS:
            loggers.log(row, row["iteration"])
    rec = loggers.active["recorder_for_tests"]
    assert [s for s, _ in rec.rows] == [1, 2]
    assert rec.rows[1][1] == {"iteration": 2.0, "episodes": 16.0, "rollout/success": 0.5}
    # One warning per failed logger, not one per row.
    assert sorted(loggers.failed) == ["broken_for_tests", "fails_at_start_for_tests"]
    assert len(caught) == 2 and len(said) == 2
    assert "disk full" in loggers.failed["broken_for_tests"]
    loggers.close()
    assert rec.closed and not loggers.active


def test_missing_package_hint_names_the_extra(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *a, **kw):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.warns(LoggerWarning, match=r"pip install 'cairn-rl\[wandb\]'"):
        loggers = LoggerSet(["wandb"], tmp_path)
    assert not loggers.active


def test_the_install_hint_keeps_its_brackets_on_the_console(tmp_path, monkeypatch):
    # the console would read [wandb] as markup and print "pip install 'cairn-rl'"
    import builtins
    import io

    from rich.console import Console

    real = builtins.__import__

    def no_wandb(name, *a, **kw):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real(name, *a, **kw)

    out = io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True)
    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.warns(LoggerWarning):
        LoggerSet(["wandb"], tmp_path, say=console.print)
    assert "pip install 'cairn-rl[wandb]'" in out.getvalue()


def test_unknown_logger_names_fail_at_config_load():
    with pytest.raises(ConfigError, match="unknown logger") as err:
        load_config(None, ["log.loggers=[jsonl, tensorbored]"])
    assert "tensorboard" in str(err.value)
    assert {"jsonl", "tensorboard", "wandb", "mlflow"} <= set(available_loggers())
    with pytest.raises(ValueError, match="unknown logger"):
        LoggerSet(["nope"], ".")


def test_a_failing_logger_does_not_fail_a_real_run(tiny_run):
    run, messages = tiny_run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 2
    failed = [m for m in messages if "broken_for_tests" in m]
    assert len(failed) == 1 and "disk full" in failed[0]


def test_runlog_takes_loggers_and_digits_from_config_yaml(tmp_path):
    from cairn.train.loggers import register_logger

    register_logger("recorder_for_tests", Recorder)
    cfg = {"log": {"loggers": ["jsonl", "recorder_for_tests"], "trajectory_digits": 3}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    log = RunLog(tmp_path, progress=False)
    for row in ROWS:
        log.metrics(row)
    assert [s for s, _ in log.loggers.active["recorder_for_tests"].rows] == [1, 2]
    log.trajectories(1, [{"id": 0, "x": 0.123456789, "y": [2.718281828]}])
    import gzip

    with gzip.open(tmp_path / "trajectories" / "iter_000001.jsonl.gz", "rt") as f:
        assert json.loads(f.read()) == {"id": 0, "x": 0.123, "y": [2.72]}
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2


def _log_rows(run_dir, name):
    log = RunLog(run_dir, progress=False, loggers=["jsonl", name], config={"name": "t"})
    assert name in log.loggers.active, log.loggers.failed
    for row in ROWS:
        log.metrics(row)
    log.close()
    assert not log.loggers.failed, log.loggers.failed


def test_tensorboard_logger_writes_readable_scalars(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (extra: tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _log_rows(tmp_path, "tensorboard")
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("rollout/success")]
    assert got == [(1, 0.25), (2, 0.5)]
    assert [e.step for e in acc.Scalars("actor/kl")] == [1]  # None is not logged


def test_mlflow_logger_uses_a_local_file_store(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow not installed (extra: mlflow)")
    from mlflow.tracking import MlflowClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        _log_rows(tmp_path, "mlflow")
        client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
        (run,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
        hist = client.get_metric_history(run.info.run_id, "rollout/success")
    assert sorted((m.step, m.value) for m in hist) == [(1, 0.25), (2, 0.5)]
    assert run.info.status in ("FINISHED", "RUNNING") and run.data.params["name"] == "t"


def test_wandb_logger_works_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb not installed (extra: wandb)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _log_rows(tmp_path, "wandb")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
