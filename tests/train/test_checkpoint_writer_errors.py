"""A checkpoint writer's error of any type (safetensors' SafetensorError on a full disk is
not an OSError) ends the run in the one-line hint and leaves no temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import SafetensorError

from cairn.cli.supervise import RunStopped, run_trainer
from cairn.train.checkpoint import write
from cairn.train.checkpoint.layout import CheckpointWriteError
from cairn.train.checkpoint.read import Checkpoint, latest_checkpoint
from cairn.train.checkpoint.write import write_checkpoint

from .checkpoint_stubs import StubTokenizer, TinyModule, train_state


def _save(run: Path, iteration: int) -> Path:
    return write_checkpoint(
        run, iteration, TinyModule(), StubTokenizer(), train_state(iteration), keep=3
    )


def _disk_full(*args, **kwargs):
    raise SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
        'space left on device" })'
    )


def test_a_safetensors_error_becomes_an_oserror_and_the_tmp_folder_goes(tmp_path, monkeypatch):
    _save(tmp_path, 1)
    monkeypatch.setattr(write, "save_file", _disk_full)
    with pytest.raises(CheckpointWriteError, match=r"iter_000002 could not be written \(Safe"):
        _save(tmp_path, 2)  # old code: a raw SafetensorError, .iter_000002.tmp left behind
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000001", "latest"]
    assert latest_checkpoint(tmp_path) == Checkpoint(tmp_path / "checkpoints" / "iter_000001")


def test_an_oserror_also_removes_the_tmp_folder(tmp_path):
    class Full(StubTokenizer):
        def save_pretrained(self, folder: Path) -> None:
            raise OSError(28, "No space left on device", str(folder / "tokenizer.json"))

    with pytest.raises(OSError, match="No space left"):
        write_checkpoint(tmp_path, 1, TinyModule(), Full(), train_state(1), keep=3)
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "checkpoints").iterdir())


def test_the_cli_ends_in_the_one_line_hint(tmp_path, monkeypatch):
    _save(tmp_path, 1)

    class Trainer:
        def run(self):
            monkeypatch.setattr(write, "save_file", _disk_full)
            return _save(tmp_path, 2)

    with pytest.raises(RunStopped) as err:
        run_trainer(Trainer(), tmp_path)
    text = str(err.value)
    assert "could not be written (SafetensorError" in text and "No space left" in text
    assert "iter_000001 is intact; resume with cairn train --resume" in text
    assert "\n" not in text
