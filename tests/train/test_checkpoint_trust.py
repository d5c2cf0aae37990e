"""Nothing in a checkpoint is trusted: its state against a schema, paths kept inside the run,
pruning by validated iteration, fallback past any bad checkpoint, metrics rows rebuilt."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from checkpoint_stubs import StubTokenizer, TinyModule, train_state

from cairn.train.checkpoint.layout import CheckpointError, CheckpointWarning
from cairn.train.checkpoint.read import Checkpoint, check_checkpoint, latest_checkpoint
from cairn.train.checkpoint.resume import check_optimizer
from cairn.train.checkpoint.write import write_checkpoint

SHA = "0123456789abcdef" * 4


def _state(iteration: int) -> dict:
    """A trainer-like state: counters, an AdamW state, RNG states, metrics rows."""
    import numpy as np

    model = TinyModule()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.w.sum().backward()
    opt.step()
    return {
        **train_state(iteration),
        "episodes": 16 * iteration,
        "train_seconds": 1.5,
        "evals": [{"iteration": 0, "eval/success": 0.25}],
        "optimizer": opt.state_dict(),
        "task_rng": np.random.default_rng([1, 1]).bit_generator.state,
        "torch_rng": torch.get_rng_state(),
        "metrics": [{"iteration": iteration, "rollout/success": 0.5}],
        "config_sha256": SHA,
    }


def _save(run: Path, iteration: int, keep: int = 10) -> Path:
    return write_checkpoint(
        run, iteration, TinyModule(), StubTokenizer(), _state(iteration), keep=keep
    )


def _plant(folder: Path, change) -> None:
    """Edit state.json's skeleton with ``change`` and fix the manifest's size for it, so
    only the schema can tell (what a hostile edit would do)."""
    path = folder / "state.json"
    saved = json.loads(path.read_text())
    change(saved["state"])
    path.write_text(json.dumps(saved))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["state.json"] = path.stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _set(key: str, value):
    def change(state: dict) -> None:
        target = state
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value

    return change


def _names(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("iter_"))


# -- 1. the state against its schema -----------------------------------------------------------
BAD_STATES = [
    # (key, planted value, what the one-line refusal says)
    ("iteration", -5, r"iteration: -5 is not an int in \[1, 1000000000\]"),
    ("iteration", "2", r"iteration: '2' is not an int"),
    ("iteration", True, r"iteration: True is not an int"),
    ("episodes", -1, r"episodes: -1 is not an int in \[0, "),
    ("train_seconds", {"__float__": "nan"}, r"train_seconds: nan is not a finite number >= 0"),
    ("evals", [{"iteration": 99}], r"evals\[0\]\.iteration: 99 is not an int in \[0, 2\]"),
    ("metrics", [{"iteration": 0}], r"metrics\[0\]\.iteration: 0 is not an int in \[1, 2\]"),
    ("task_rng.state.state", 2**129, r"task_rng\.state\.state: .* is not an int in \[0, "),
    ("task_rng.bit_generator", "MT19937", r"task_rng: not a numpy PCG64 generator state"),
    ("config_sha256", "ABC", r"config_sha256: 'ABC' is not 64 lowercase hex digits"),
    ("optimizer", [], r"optimizer: not an optimizer state"),
    ("torch_rng", {"__tensor__": "nope"}, r"torch_rng: __tensor__ 'nope' is not a tensor"),
    ("episodes", {"__npscalar__": "<U1000000", "value": "x"}, r"'<U1000000' is not a numeric"),
    ("episodes", {"__npscalar__": "|i1", "value": 300}, r"value does not fit \|i1"),
    ("episodes", {"__float__": "1e999999"}, r"__float__ '1e999999' is not nan, inf or -inf"),
    ("episodes", {"__dict__": [[[1], 2]]}, r"malformed"),
]


@pytest.mark.parametrize(("key", "value", "says"), BAD_STATES, ids=[b[2][:28] for b in BAD_STATES])
def test_a_state_that_breaks_the_schema_is_refused_naming_the_key(tmp_path, key, value, says):
    # Old code used every one of these: "iteration": -5 made a resume drop every metrics
    # row and trajectory; a "<U600000000" numpy scalar allocated 2.4 GB per value.
    folder = _save(tmp_path, 2)
    _plant(folder, _set(key, value))
    assert check_checkpoint(folder) is not None
    with pytest.raises(CheckpointError, match=says) as err:
        latest_checkpoint(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match=says):
        Checkpoint(folder).load_state()


@pytest.mark.parametrize("key", ["wall_seconds", "warmup", "shuffle_rng"])
def test_a_state_lacking_a_key_of_the_loop_is_refused_naming_it(tmp_path, key):
    folder = _save(tmp_path, 2)
    _plant(folder, lambda state: state.pop(key))
    with pytest.raises(CheckpointError, match=rf"iter_000002: state\.json: {key}: missing") as err:
        latest_checkpoint(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(CheckpointError, match=rf"state\.json: {key}: missing$"):
        Checkpoint(folder).load_state()


def test_a_valid_state_with_a_config_hash_loads(tmp_path):
    folder = _save(tmp_path, 2)
    assert check_checkpoint(folder) is None
    state = Checkpoint(folder).load_state()
    assert state["config_sha256"] == SHA and state["metrics"][0]["iteration"] == 2


def test_state_iteration_must_match_the_folder_number(tmp_path):
    folder = _save(tmp_path, 2)
    _plant(folder, _set("iteration", 7))  # within range, but not this folder's
    assert check_checkpoint(folder) == "state.json: iteration: 7, but the folder is iter_000002"


def test_optimizer_tensors_must_have_their_parameters_shapes():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    saved = torch.optim.AdamW(torch.nn.Linear(4, 2).parameters()).state_dict()
    saved["state"] = {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2, 4)}}
    # torch's load_state_dict takes it (it checks counts only) and the next step fails.
    with pytest.raises(CheckpointError, match=r"optimizer\.state\.0\.exp_avg: shape \[2, 4\], "):
        check_optimizer(opt, saved, "optimizer")
    saved["param_groups"][0]["params"] = [0]
    with pytest.raises(CheckpointError, match=r"groups of sizes \[1\], this run's .* \[2\]"):
        check_optimizer(opt, saved, "optimizer")


# -- 2. every path stays inside the run ----------------------------------------------------------
def test_latest_pointing_at_another_run_is_ignored(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _save(mine, 1)
    foreign = _save(theirs, 5)
    for target in (str(foreign), f"../../theirs/checkpoints/{foreign.name}"):
        (mine / "checkpoints" / "latest").write_text(target)
        # Old code joined the absolute path and returned the other run's iter_000005.
        with pytest.warns(CheckpointWarning, match=r"latest names .* not a checkpoint folder"):
            assert latest_checkpoint(mine) == Checkpoint(mine / "checkpoints" / "iter_000001")


def test_links_out_of_a_checkpoint_are_refused(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    _save(mine, 1)
    foreign = _save(theirs, 5)
    (mine / "checkpoints" / "iter_000005").symlink_to(foreign, target_is_directory=True)
    (mine / "checkpoints" / "latest").write_text("iter_000005")  # a name of this run's form
    with pytest.warns(CheckpointWarning, match="iter_000005: the folder is a symbolic link"):
        assert latest_checkpoint(mine).name == "iter_000001"
    own = mine / "checkpoints" / "iter_000001"
    (own / "model.safetensors").unlink()
    (own / "model.safetensors").symlink_to(foreign / "model.safetensors")
    assert (
        check_checkpoint(own)
        == "model.safetensors is a symbolic link (a checkpoint holds only its own files)"
    )
    shutil.rmtree(mine / "checkpoints")
    (mine / "checkpoints").symlink_to(theirs / "checkpoints", target_is_directory=True)
    with pytest.raises(CheckpointError, match="is a symbolic link: a run reads only its own"):
        latest_checkpoint(mine)


def test_a_manifest_naming_a_path_outside_is_refused(tmp_path):
    folder = _save(tmp_path, 1)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["../../../etc/passwd"] = 10
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert "a path outside the checkpoint" in check_checkpoint(folder)


# -- 3. pruning by validated iteration -----------------------------------------------------------
def test_keep_1_keeps_the_checkpoint_just_written_not_a_stale_corrupt_one(tmp_path):
    for it in (4, 5, 9):
        _save(tmp_path, it)
    with (tmp_path / "checkpoints" / "iter_000009" / "model.safetensors").open("r+b") as f:
        f.truncate(20)  # a stale, corrupt checkpoint of an abandoned longer run
    # Resumed from 5, the run writes 6 with keep=1. Old code sorted names, kept iter_000009
    # and deleted 6 and 5; `latest` then named a missing folder.
    _save(tmp_path, 6, keep=1)
    assert _names(tmp_path) == ["iter_000006"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latest_checkpoint(tmp_path).name == "iter_000006"


def test_keep_2_keeps_the_newest_valid_one_before_by_number(tmp_path):
    for it in (3, 4, 5):
        _save(tmp_path, it)
    _plant(tmp_path / "checkpoints" / "iter_000005", _set("iteration", 9))  # not its number
    shutil.copytree(tmp_path / "checkpoints" / "iter_000004", tmp_path / "checkpoints" / "iter_4")
    _save(tmp_path, 6, keep=2)  # the 7-digit 1000000 > 999999 below: numbers, not names
    # iter_4 is not a name cairn writes: neither a checkpoint nor pruned.
    assert _names(tmp_path) == ["iter_000004", "iter_000006", "iter_4"]
    shutil.rmtree(tmp_path / "checkpoints" / "iter_4")
    for it in (999_999, 1_000_000):
        _save(tmp_path, it, keep=2)
    assert _names(tmp_path) == ["iter_1000000", "iter_999999"]


# -- 4. fallback past any bad newest checkpoint ------------------------------------------------
def test_same_size_garbage_state_falls_back_to_the_older_checkpoint(tmp_path):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    size = (newest / "state.json").stat().st_size
    (newest / "state.json").write_bytes(b"\x00" * size)  # old code: the resume ended here
    with pytest.warns(
        CheckpointWarning, match=r"resuming from iter_000001.*state\.json is unreadable"
    ):
        assert latest_checkpoint(tmp_path).name == "iter_000001"


def test_a_planted_pickle_in_the_newest_falls_back_too(tmp_path):
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    (newest / "extra.pkl").write_bytes(b"never loaded")
    with pytest.warns(CheckpointWarning, match=r"iter_000002: checkpoint .* pickle files"):
        assert latest_checkpoint(tmp_path).name == "iter_000001"


# -- end to end: a trainer resuming ------------------------------------------------------------
SMALL = [
    "rollout.groups=2", "rollout.group_size=2", "eval.every=0", "eval.at_start=false",
    "train.time_budget_s=null", "train.threads=1", "log.progress=false", "checkpoint.every=1",
    "checkpoint.keep=5",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 2-iteration run with a checkpoint after each iteration (copied by each test)."""
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    out = tmp_path_factory.mktemp("trained")
    run = out / "run"
    Trainer(load_config(None, [*SMALL, f"out_dir={out}", "train.iterations=2"]), run).run()
    return run


def _copy(trained: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


def _resume(run: Path, iterations: int):
    from cairn.train.config import load_config
    from cairn.train.trainer import Trainer

    cfg = load_config(None, [*SMALL, f"out_dir={run.parent}", f"train.iterations={iterations}"])
    return Trainer(cfg, run, resume=True)


def test_a_bad_iteration_in_the_newest_resumes_from_the_older_and_keeps_the_rows(trained, tmp_path):
    from cairn.train.runlog import read_metrics

    run = _copy(trained, tmp_path)
    _plant(run / "checkpoints" / "iter_000002", _set("iteration", -5))
    with pytest.warns(CheckpointWarning, match="resuming from iter_000001.*iteration: -5"):
        trainer = _resume(run, 3)
    assert trainer.iteration == 1
    trainer.run()
    assert [r["iteration"] for r in read_metrics(run)] == [1, 2, 3]
    assert sorted(p.name for p in (run / "trajectories").iterdir())[-1] == "iter_000003.jsonl.gz"


def test_cli_resume_with_no_valid_checkpoint_is_one_line_and_changes_nothing(
    trained, tmp_path, capsys
):
    from cairn.cli import main

    run = _copy(trained, tmp_path)
    for folder in (run / "checkpoints").glob("iter_*"):
        _plant(folder, _set("iteration", -5))
    before = (run / "metrics.jsonl").read_bytes()
    assert main(["train", "--resume", str(run)]) != 0
    out = capsys.readouterr().out
    assert "iteration: -5 is not an int" in out and "Traceback" not in out
    assert (run / "metrics.jsonl").read_bytes() == before  # old code: every row deleted
    assert len(list((run / "trajectories").iterdir())) == 2


def test_cli_resume_past_a_bad_newest_checkpoint_warns_once(trained, tmp_path):
    import warnings

    from cairn.cli import main

    run = _copy(trained, tmp_path)
    _plant(run / "checkpoints" / "iter_000002", _set("iteration", -5))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["train", "--resume", str(run), "--set", "train.iterations=3"]) == 0
    said = [w for w in seen if issubclass(w.category, CheckpointWarning)]
    assert len(said) == 1, [str(w.message) for w in said]  # was 3: once per look-up
    assert "resuming from iter_000001" in str(said[0].message)


def test_a_torn_metrics_row_covered_by_a_checkpoint_is_rebuilt(trained, tmp_path):
    from cairn.train.runlog import read_metrics

    run = _copy(trained, tmp_path)
    rows = read_metrics(run)
    text = (run / "metrics.jsonl").read_text()
    cut = text.rindex("\n", 0, len(text) - 1) + 1 + 40  # row 2 cut after 40 characters
    (run / "metrics.jsonl").write_text(text[:cut])
    trainer = _resume(run, 3)
    # Old code dropped the torn row 2 for good: the resumed run wrote [1, 3].
    assert read_metrics(run) == rows
    trainer.run()
    after = read_metrics(run)
    assert [r["iteration"] for r in after] == [1, 2, 3] and after[1] == rows[1]
