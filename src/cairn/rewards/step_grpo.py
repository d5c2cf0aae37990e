"""Step-GRPO's dense rewards (R1-VL, arXiv 2503.12937, Sec. 3.2), added to the outcome.

StepRAR (accuracy): key steps of the reference solution, each a list of alternative
phrases, are soft-matched (case-insensitive, whitespace-normalised substring) in the
episode's reasoning; the shaped term on the last step is ``weight * matched / total``
(weight 0.1), so with the env's outcome reward 1{correct} the step reward is
``1{correct} + 0.1 * matched / total``. Key steps come from the env's reset info
(``info["key_steps"]``), kept on the episode as ``meta["key_steps"]``.

StepRVR (validity): 1 when a step's completion has the required structure, in order —
by default a description, a rationale, numbered steps 1, 2, ... in order, and the final
answer last — else 0; ``weight`` scales it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cairn.data.episode import Episode

__all__ = ["StepAccuracy", "StepValidity", "key_step_matches", "valid_structure"]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def key_step_matches(text: str, key_steps: Sequence[Sequence[str] | str]) -> int:
    """How many key steps have at least one alternative phrase inside ``text``."""
    body = _norm(text)
    count = 0
    for step in key_steps:
        alternatives = [step] if isinstance(step, str) else step
        count += any(_norm(a) in body for a in alternatives if _norm(a))
    return count


class StepAccuracy:
    """``step_accuracy``: 0.1 * matched key steps / total, on the episode's last step."""

    name = "step_accuracy"

    def __init__(self, weight: float = 0.1):
        self.weight = weight

    def __call__(self, episodes: Sequence[Episode], ctx=None) -> None:
        for e in episodes:
            keys = e.meta.get("key_steps")
            if keys is None:
                raise ValueError(
                    "reward step_accuracy needs key steps: the env must put "
                    "info['key_steps'] (a list of phrases or lists of alternatives) in its "
                    "reset info"
                )
            if not e.steps:
                continue
            text = "\n".join(s.completion for s in e.steps)
            frac = key_step_matches(text, keys) / len(keys) if keys else 0.0
            e.steps[-1].shaped[self.name] = self.weight * frac


_STEP = re.compile(r"step\s*(\d+)\s*[:.)]", re.IGNORECASE)


def valid_structure(text: str, sections: Sequence[str], answer: str) -> bool:
    """Sections in order, then steps numbered 1..k in order, then ``answer`` last."""
    pos = 0
    for pattern in sections:
        m = re.compile(pattern, re.IGNORECASE).search(text, pos)
        if m is None:
            return False
        pos = m.end()
    numbers = [(int(m.group(1)), m.start()) for m in _STEP.finditer(text, pos)]
    if not numbers or [n for n, _ in numbers] != list(range(1, len(numbers) + 1)):
        return False
    finals = list(re.compile(answer, re.IGNORECASE).finditer(text, numbers[-1][1]))
    return bool(finals) and not _STEP.search(text, finals[-1].end())


class StepValidity:
    """``step_validity``: ``weight`` when a completion is complete and in order, else 0."""

    name = "step_validity"

    def __init__(
        self,
        weight: float = 1.0,
        sections: Sequence[str] = (r"description\s*:", r"rationale\s*:"),
        answer: str = r"answer\s*:",
    ):
        for p in [*sections, answer]:
            re.compile(p)
        self.weight, self.sections, self.answer = weight, tuple(sections), answer

    def __call__(self, episodes: Sequence[Episode], ctx=None) -> None:
        for e in episodes:
            for s in e.steps:
                ok = valid_structure(s.completion, self.sections, self.answer)
                s.shaped[self.name] = self.weight * float(ok)
