"""IGPO's information-gain turn reward (arXiv 2510.14967, Sec. 3.2).

p_k is the policy's probability of the ground-truth answer teacher-forced after the
context the agent sees at turn k, ``exp(mean token logprob)`` of the answer action (a raw
probability, not a log). The prompt of turn k+1 is exactly the context after turn k, so
with q_k = p(answer | prompt of turn k):

    info_gain_t = q_{t+1} - q_t      for every turn t but the episode's last
    info_gain_T = 0                  (the last turn's reward is the outcome; the ``igpo``
                                      estimator reads ``reward`` there)

The answer comes from the env's reset info (``info["answer"]``, kept as
``meta["answer"]``), written in the action format of ``template``. ``span="answer"`` (the
paper's p of the ground-truth answer) scores only the answer's own tokens, the template's
text before ``{answer}`` (e.g. ``answer [``) teacher-forced as context after the prompt;
``span="action"`` scores the whole answer action, whose tool words mostly measure whether
the policy would answer *now* (low before a search, high after it) rather than what it
knows: on search_qa that gave every search a gain of ~0.4
(benchmarks/results/credit/step_credit.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from cairn.data.episode import Episode
from cairn.data.tokens import collate_scoring

__all__ = ["InfoGain"]


class InfoGain:
    """``info_gain``: fills the ``info_gain`` step column used by the ``igpo`` estimator."""

    name = "info_gain"

    def __init__(
        self, template: str = "answer[{answer}]", batch_size: int = 256, span: str = "answer"
    ):
        if "{answer}" not in template:
            raise ValueError(f"info_gain template {template!r} must contain '{{answer}}'")
        if span not in ("answer", "action"):
            raise ValueError(f"info_gain span {span!r} is not one of answer, action")
        self.template, self.batch_size, self.span = template, batch_size, span

    @torch.no_grad()
    def answer_probs(self, policy, prompts: list[list[int]], answers: list[list[int]]):
        """q for each (prompt, answer) pair: exp(mean logprob of the answer tokens), (N,)."""
        out = []
        for start in range(0, len(prompts), self.batch_size):
            p, a = (
                prompts[start : start + self.batch_size],
                answers[start : start + self.batch_size],
            )
            inputs = collate_scoring(p, a, pad_id=policy.pad_id)
            logp, _ = policy.score(inputs, with_entropy=False)
            mask = inputs.action_mask.float()
            out.append(((logp * mask).sum(-1) / mask.sum(-1).clamp(min=1)).exp())
        return torch.cat(out).numpy() if out else np.zeros(0)

    def _answer_ids(self, policy, answer: str) -> tuple[list[int], list[int]]:
        """(teacher-forced context, scored ids) of the answer action (``span``); unknown
        tokens would score a placeholder, so they fail."""
        text = self.template.format(answer=answer)
        if self.span == "action":
            head, ids = list[int](), policy.encode(text)
        else:
            before = self.template[: self.template.index("{answer}")]
            head, ids = policy.encode(before) if before.strip() else [], policy.encode(answer)
        unk = getattr(getattr(policy, "tokenizer", None), "unk_token_id", None)
        if unk is not None and unk in [*head, *ids, *policy.encode(text)]:
            raise ValueError(
                f"info_gain: the tokenizer cannot write the answer action {text!r} (unknown "
                "tokens); set the reward's template to words it has, e.g. 'answer [ {answer} ]'"
            )
        return head, ids

    def __call__(self, episodes: Sequence[Episode], ctx) -> None:
        prompts, answers = [], []
        for e in episodes:
            if "answer" not in e.meta:
                raise ValueError(
                    "reward info_gain needs the ground-truth answer: the env must put "
                    "info['answer'] in its reset info (search_qa does)"
                )
            head, ids = self._answer_ids(ctx.policy, e.meta["answer"])
            for s in e.steps:
                prompts.append([*s.prompt_ids, *head])
                answers.append(ids)
        q = self.answer_probs(ctx.policy, prompts, answers)
        row = 0
        for e in episodes:
            n = len(e.steps)
            qe = q[row : row + n]
            for t, s in enumerate(e.steps):
                s.columns["info_gain"] = float(qe[t + 1] - qe[t]) if t + 1 < n else 0.0
            row += n
