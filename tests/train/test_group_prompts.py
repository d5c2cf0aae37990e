"""optim.group_prompts and optim.group_tasks end to end: minibatches hold whole prompts
(whole tasks), so the shared-prefix scoring reads each prompt (each task's common prefix)
once per minibatch; the rollout is the same."""

from __future__ import annotations

import numpy as np

from cairn import policies as policies_mod
from cairn.data import tokens as tokens_mod
from cairn.policies import GenerationOptions
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

BASE = [
    "rollout.groups=3", "rollout.group_size=4", "rollout.max_turns=1",
    "optim.minibatch_size=4", "optim.epochs=1", "train.threads=1",
    "train.iterations=1", "train.time_budget_s=null", "eval.at_start=false",
    "eval.every=0", "log.progress=false", "checkpoint.every=1000",
]  # fmt: skip


def _iteration(
    tmp_path, group: bool, monkeypatch, by: str = "prompts", extra: tuple[str, ...] = ()
) -> tuple[dict, list[list[int]]]:
    """One iteration with the prompt sharing of a real model, minibatches grouped ``by``
    prompts or tasks or not (``group``); each minibatch's prompt (task) labels."""
    chunks: list[list[int]] = []
    minibatch = tokens_mod.TokenBatch.minibatch

    def spy(self, idx):
        labels = self.prompt_labels() if by == "prompts" else self.task_labels()
        chunks.append(labels[idx].tolist())
        return minibatch(self, idx)

    sets = [*BASE, *extra, f"optim.group_{by}={group}", f"out_dir={tmp_path}"]
    cfg = load_config(None, sets)
    with monkeypatch.context() as m:
        m.setattr(tokens_mod.TokenBatch, "minibatch", spy)
        # The prompt sharing of a real model, chosen when the policy is built.
        options = GenerationOptions(share_prefix=True, min_shared_prefix=1)
        m.setattr(policies_mod, "generation_options", lambda cfg, extend_turns=False: options)
        trainer = Trainer(cfg, tmp_path / f"run_{by}_{group}")
        assert trainer.policy.options == options
        trainer.iteration = 1
        return trainer.train_iteration(), chunks


def test_grouped_minibatches_hold_whole_prompts_and_read_fewer_tokens(tmp_path, monkeypatch):
    shuffled, mixed = _iteration(tmp_path, False, monkeypatch)
    grouped, whole = _iteration(tmp_path, True, monkeypatch)
    rollout = [k for k in shuffled if k.startswith("rollout/")]
    assert rollout and all(shuffled[k] == grouped[k] for k in rollout)  # the same samples
    # 3 groups of 4 rows, one prompt each (1 turn): 3 minibatches of 4 rows.
    assert [len(c) for c in whole] == [4, 4, 4] and all(len(set(c)) == 1 for c in whole)
    assert sorted(c[0] for c in whole) == [0, 1, 2]
    assert any(len(set(c)) > 1 for c in mixed)  # the shuffle mixes prompts (seed 0)
    # Each prompt is read once per minibatch instead of once per prompt in it.
    assert grouped["update/forward_tokens"] < shuffled["update/forward_tokens"]
    assert np.isfinite(grouped["actor/loss"])


def test_grouped_tasks_keep_every_turn_of_a_task_together(tmp_path, monkeypatch):
    turns = ("rollout.max_turns=3", "optim.minibatch_size=6")
    shuffled, mixed = _iteration(tmp_path, False, monkeypatch, "tasks", turns)
    grouped, chunks = _iteration(tmp_path, True, monkeypatch, "tasks", turns)
    rollout = [k for k in shuffled if k.startswith("rollout/")]
    assert rollout and all(shuffled[k] == grouped[k] for k in rollout)  # the same samples
    order = [label for chunk in chunks for label in chunk]
    runs = [label for i, label in enumerate(order) if i == 0 or order[i - 1] != label]
    assert sorted(runs) == [0, 1, 2]  # each task's rows in one run, cut only at a chunk's end
    assert len(order) > 12  # 3 tasks x 4 episodes, some of more than one turn
    assert any(len(set(c)) > 1 for c in mixed)  # the shuffle mixes tasks
    # A task's turns share its first observation's prompt prefix, read once per minibatch.
    assert grouped["update/forward_tokens"] < shuffled["update/forward_tokens"]
    assert np.isfinite(grouped["actor/loss"])
