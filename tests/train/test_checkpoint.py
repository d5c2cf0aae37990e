"""Checkpoints without pickle, and the fall-back past a corrupt newest checkpoint."""

from __future__ import annotations

import math
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_stubs import StubTokenizer, TinyModule, train_state

from cairn.train.checkpoint.codec import flatten, unflatten
from cairn.train.checkpoint.layout import CheckpointError, CheckpointWarning
from cairn.train.checkpoint.read import Checkpoint, latest_checkpoint
from cairn.train.checkpoint.write import write_checkpoint


def _trainer_like_state() -> dict:
    """What ``Trainer._state`` holds: an AdamW state, RNG states, counters and nested dicts."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    rng = np.random.default_rng([5, 1])
    rng.random(3)
    gen = torch.Generator().manual_seed(7)
    return {
        "iteration": 3,
        "episodes": 48,
        "train_seconds": 1.25,
        "wall_seconds": 2.5,
        "evals": [{"iteration": 0, "eval/success": 0.5, "eval/return": float("nan")}],
        "warmup": {},
        "optimizer": opt.state_dict(),  # int keys, a tuple of betas, 0-d step tensors
        "task_rng": rng.bit_generator.state,  # 128-bit ints
        "shuffle_rng": np.random.default_rng([5, 2]).bit_generator.state,
        "sample_gen": gen.get_state(),  # uint8 tensor
        "torch_rng": torch.get_rng_state(),
        "ref_model": model.state_dict(),
        "critic_optimizer": None,
        "exploration": {"rng": rng.bit_generator.state, "sampler": {"history": {4: [(1, "a")]}}},
        "rewards": [None, {"states": ["s0"], "counts": [np.int64(2)], "emb": np.eye(2)}],
        "__odd": True,  # a key that looks like a tag
    }


def _same(a, b) -> bool:
    """Equal with the same types all the way down (tensors: same dtype, shape and values;
    an OrderedDict, e.g. a module's state_dict, comes back as a dict in the same order)."""
    if type(a) is not type(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_flatten_round_trip_keeps_every_value_and_type():
    state = _trainer_like_state()
    skeleton, tensors = flatten(state)
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())
    assert _same(unflatten(skeleton, tensors), state)


def test_flatten_refuses_arbitrary_objects():
    with pytest.raises(TypeError, match=r"state\.rewards\[0\].*object"):
        flatten({"rewards": [object()]})


def _save(run: Path, iteration: int, state: dict | None = None) -> Path:
    state = state if state is not None else train_state(iteration)
    return write_checkpoint(run, iteration, TinyModule(), StubTokenizer(), state, keep=3)


def test_saved_state_loads_back_exactly_and_holds_no_pickle(tmp_path):
    state = _trainer_like_state()
    folder = _save(tmp_path, 1, state)
    assert _same(Checkpoint(folder).load_state(), state)
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.pkl"))
    # The restored generators continue the same streams.
    rng = np.random.default_rng()
    rng.bit_generator.state = Checkpoint(folder).load_state()["task_rng"]
    again = np.random.default_rng()
    again.bit_generator.state = state["task_rng"]
    assert rng.random() == again.random()


class _Payload:
    """Unpickling this runs ``Path.touch`` on a marker file (any call would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_state_is_refused_and_never_executed(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    folder = _save(run, 1)
    (folder / "state.json").unlink()
    (folder / "state.safetensors").unlink()
    (folder / "manifest.json").unlink()
    with (folder / "state.pt").open("wb") as f:
        pickle.dump({"iteration": 1, "x": _Payload(marker)}, f)
    with pytest.raises(CheckpointError, match=r"pickle files \['state\.pt'\]"):
        latest_checkpoint(run)
    with pytest.raises(CheckpointError, match=r"pickle files \['state\.pt'\]"):
        Checkpoint(folder).load_state()
    assert not marker.exists()


def test_a_checkpoint_with_pickled_weights_is_refused(tmp_path):
    folder = _save(tmp_path, 1)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")  # transformers would
    manifest = (folder / "manifest.json").read_text()  # torch.load it
    (folder / "manifest.json").write_text(
        manifest.replace("model.safetensors", "pytorch_model.bin")
    )
    with pytest.raises(CheckpointError, match=r"pickle files \['pytorch_model\.bin'\]"):
        latest_checkpoint(tmp_path)


@pytest.mark.parametrize("damage", ["truncate_model", "delete_state", "pointer_to_missing"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_complete(tmp_path, damage):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    if damage == "truncate_model":
        with (newest / "model.safetensors").open("r+b") as f:
            f.truncate(20)
    elif damage == "delete_state":
        (newest / "state.json").unlink()
    else:
        (tmp_path / "checkpoints" / "latest").write_text("iter_000009")
    expected = "iter_000002" if damage == "pointer_to_missing" else "iter_000001"
    with pytest.warns(CheckpointWarning, match=f"resuming from {expected}"):
        assert latest_checkpoint(tmp_path).name == expected


def test_a_corrupt_safetensors_header_is_caught_even_at_the_right_size(tmp_path):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    data = bytearray((newest / "state.safetensors").read_bytes())
    data[8:12] = b"\xff\xff\xff\xff"  # the JSON header starts at byte 8
    (newest / "state.safetensors").write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="state.safetensors is unreadable"):
        assert latest_checkpoint(tmp_path).name == "iter_000001"


def test_a_complete_latest_needs_no_warning_and_none_complete_is_an_error(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    _save(tmp_path, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latest_checkpoint(tmp_path).name == "iter_000001"
    os.remove(tmp_path / "checkpoints" / "iter_000001" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"iter_000001: model\.safetensors is missing"):
        latest_checkpoint(tmp_path)


def test_resume_past_a_truncated_newest_checkpoint(tmp_path):
    from cairn.train.config import load_config
    from cairn.train.runlog import read_metrics
    from cairn.train.trainer import Trainer

    small = [
        "rollout.groups=2", "rollout.group_size=2", "eval.every=0", "eval.at_start=false",
        "train.time_budget_s=null", "train.threads=1", "log.progress=false",
        f"out_dir={tmp_path}", "checkpoint.every=1",
    ]  # fmt: skip
    run = tmp_path / "run"
    Trainer(load_config(None, [*small, "train.iterations=2"]), run).run()
    with (run / "checkpoints" / "iter_000002" / "model.safetensors").open("r+b") as f:
        f.truncate(100)
    skipped = r"resuming from iter_000001.*model\.safetensors has 100 bytes"
    with pytest.warns(CheckpointWarning, match=skipped):
        trainer = Trainer(load_config(None, [*small, "train.iterations=3"]), run, resume=True)
    assert trainer.iteration == 1
    trainer.run()
    assert [r["iteration"] for r in read_metrics(run)] == [1, 2, 3]


def test_cli_resume_of_a_pickled_checkpoint_is_one_line(tmp_path, capsys):
    import yaml

    from cairn.cli import main
    from cairn.train.config import load_config

    run = tmp_path / "run"
    folder = _save(run, 1)
    (folder / "state.json").unlink()
    (folder / "manifest.json").unlink()
    (folder / "state.pt").write_bytes(b"not loaded")
    config = load_config(None, [f"out_dir={tmp_path}", "log.progress=false"]).model_dump()
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "--resume", str(run)]) != 0
    out = capsys.readouterr().out
    assert "pickle files ['state.pt']" in out and "Traceback" not in out
