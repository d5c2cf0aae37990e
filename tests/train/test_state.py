"""TrainState: the trainer's counters and random streams, and their state dict (the
checkpoint's keys; a loaded state continues the streams exactly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.train.checkpoint.layout import CheckpointError
from cairn.train.checkpoint.schema import REQUIRED, StateError, check_trainer_state
from cairn.train.checkpoint.state import TrainState

KEYS = {
    "iteration", "episodes", "train_seconds", "wall_seconds", "evals", "warmup",
    "task_rng", "shuffle_rng", "sample_gen", "torch_rng",
}  # fmt: skip


def _draws(state: TrainState) -> tuple[list[int], list[int], list[int]]:
    """The next task seeds, minibatch order and sampled token ids each stream gives."""
    return (
        state.task_rng.integers(0, 10**9, size=2).tolist(),
        state.shuffle_rng.permutation(5).tolist(),
        torch.randint(0, 1000, (2,), generator=state.sample_gen).tolist(),
    )


def test_a_fresh_state_draws_the_streams_runs_have_always_drawn():
    # the seeding of the trainer before TrainState (task [seed, 1], shuffle [seed, 2],
    # sampling seed * 7919 + 3): recorded runs and resumed old checkpoints depend on it
    state = TrainState.start(seed=0)
    assert (state.iteration, state.episodes, state.train_seconds) == (0, 0, 0.0)
    assert state.evals == [] and state.warmup_stats == {}
    assert _draws(state) == ([522157081, 889738791], [4, 2, 1, 0, 3], [986, 48])


def test_another_rank_draws_its_own_tasks_and_tokens_but_the_same_minibatch_order():
    # rank 1: task [seed, 1, 1], sampling seed * 7919 + 3 + 104729
    assert _draws(TrainState.start(seed=0, rank=1)) == (
        [674263323, 848650043],
        [4, 2, 1, 0, 3],
        [843, 543],
    )


def test_a_fresh_state_seeds_torchs_global_generator():
    # a process starts torch's generator from a random seed: unseeded, two identical runs
    # checkpointed different torch_rng states
    TrainState.start(seed=4)
    first = torch.rand(3)
    torch.rand(5)  # whatever the process drew before
    TrainState.start(seed=4)
    assert torch.equal(torch.rand(3), first)
    TrainState.start(seed=4, rank=1)  # another rank: its own stream
    assert not torch.equal(torch.rand(3), first)


def test_a_loaded_state_continues_every_stream_where_the_saved_one_was():
    saved = TrainState.start(seed=5)
    _draws(saved)  # the streams have moved on
    saved.iteration, saved.episodes, saved.train_seconds = 3, 96, 12.5
    saved.evals.append({"iteration": 2, "eval/success": 0.25})
    saved.warmup_stats["warmup/updates"] = 4.0
    state = saved.state_dict(wall_seconds=20.0)
    torch_next = torch.rand(3)  # torch's global stream, after the save
    assert set(state) == KEYS and check_trainer_state(state) == 3  # the checkpoint schema
    expected = _draws(saved)
    loaded = TrainState.start(seed=0)  # another seed: everything comes from the state
    loaded.load_state_dict(state)
    assert _draws(loaded) == expected and torch.equal(torch.rand(3), torch_next)
    assert (loaded.iteration, loaded.episodes, loaded.train_seconds) == (3, 96, 12.5)
    assert loaded.wall_seconds == 20.0 and loaded.evals == saved.evals
    assert loaded.warmup_stats == {"warmup/updates": 4.0}


def test_the_schema_requires_every_key_of_the_state():
    assert set(REQUIRED) == KEYS


@pytest.mark.parametrize("key", sorted(KEYS))
def test_a_state_lacking_a_key_fails_the_schema_check_in_one_line_naming_it(key):
    state = TrainState.start(seed=1).state_dict(wall_seconds=7.0)
    del state[key]
    with pytest.raises(StateError, match=rf"^{key}: missing$"):
        check_trainer_state(state)


def test_a_stream_that_does_not_fit_is_one_line_naming_its_key():
    state = TrainState.start(seed=1).state_dict(wall_seconds=0.0)
    state["sample_gen"] = torch.zeros(3, dtype=torch.uint8)  # not a generator's state
    with pytest.raises(CheckpointError, match=r"^checkpoint state sample_gen does not fit"):
        TrainState.start(seed=1).load_state_dict(state)
    state = TrainState.start(seed=1).state_dict(wall_seconds=0.0)
    state["task_rng"] = np.random.MT19937(0).state  # another bit generator's state
    with pytest.raises(CheckpointError, match=r"^checkpoint state task_rng does not fit"):
        TrainState.start(seed=1).load_state_dict(state)
