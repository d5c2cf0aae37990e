"""A tiny real run shared by the report tests (one per test session and worker)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from cairn.train.loggers import register_logger


class BrokenLogger:
    """Fails on every row: a run that selects it must finish anyway."""

    def __init__(self, run_dir: Path, config: dict):
        self.calls = 0

    def log(self, row: dict, step: int) -> None:
        raise RuntimeError("disk full (simulated)")

    def close(self) -> None:
        pass


register_logger("broken_for_tests", BrokenLogger)

TINY = [
    "rollout.groups=2",
    "rollout.group_size=4",
    "optim.minibatch_size=32",
    "optim.epochs=1",
    "eval.episodes=4",
    "eval.every=1",
    "train.time_budget_s=null",
    "train.threads=1",
    "train.iterations=2",
    "log.progress=false",
    "log.loggers=[jsonl, broken_for_tests]",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """(run directory of a 2-iteration GiGPO sokoban run, warnings its loggers raised)."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    run = tmp_path_factory.mktemp("tiny") / "run"
    cfg = load_config(None, [*TINY, f"out_dir={run.parent}"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(cfg, run).run()
    return run, [str(w.message) for w in caught]
