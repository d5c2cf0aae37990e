"""train.pack_episodes end to end: on the chat path with the whole history in the prompt,
episodes train as one sequence each, with the loss of the per-turn rows."""

from __future__ import annotations

import pytest

from cairn._errors import ConfigError
from cairn.data import tokens as tokens_mod
from cairn.train.config import load_config
from cairn.train.trainer import Trainer

CHAT = [
    "agent.prompt_style=chat", "model.tokenizer=chat", "agent.history=8",
    "rollout.groups=2", "rollout.group_size=2", "rollout.max_turns=3",
    "rollout.restrict_to_admissible=false", "rollout.max_new_tokens=4",
    "optim.minibatch_size=512", "optim.epochs=1", "train.threads=1",
    "train.iterations=1", "train.time_budget_s=null", "eval.at_start=false",
    "eval.every=0", "eval.episodes=2", "log.progress=false", "checkpoint.every=1000",
]  # fmt: skip


def _iteration(tmp_path, pack: bool, monkeypatch) -> tuple[dict, list[int]]:
    rows: list[int] = []
    build = tokens_mod.TokenBatch.from_episodes.__func__

    def spy(cls, *args, **kwargs):
        out = build(cls, *args, **kwargs)
        rows.append(len(out))
        return out

    cfg = load_config(None, [*CHAT, f"train.pack_episodes={pack}", f"out_dir={tmp_path}"])
    with monkeypatch.context() as m:
        m.setattr(tokens_mod.TokenBatch, "from_episodes", classmethod(spy))
        trainer = Trainer(cfg, tmp_path / f"run_{pack}")
        trainer.iteration = 1
        return trainer.train_iteration(), rows


def test_packed_training_has_the_per_turn_loss_with_fewer_rows(tmp_path, monkeypatch):
    per_turn, rows_t = _iteration(tmp_path, False, monkeypatch)
    packed, rows_p = _iteration(tmp_path, True, monkeypatch)
    assert per_turn["steps"] == packed["steps"]  # the same rollout (same seed)
    assert rows_t == [per_turn["steps"]]
    # 4 episodes of up to 3 turns: each multi-turn episode became one row.
    assert rows_p == [4] and rows_t == [12]
    assert packed["actor/loss"] == pytest.approx(per_turn["actor/loss"], abs=1e-5)
    assert packed["actor/grad_norm"] == pytest.approx(per_turn["actor/grad_norm"], rel=1e-4)


@pytest.mark.parametrize("extra", [["loss.agg=seq-mean-token-mean"], ["critic.enabled=true"]])
def test_packing_refuses_what_reads_rows_as_steps(extra):
    with pytest.raises(ConfigError, match=r"train\.pack_episodes needs"):
        load_config(None, ["train.pack_episodes=true", *extra])
