"""Prompts from a data file, scored by a reward function named by import path (TRL's shape).

    cairn train dataset_smol --set env.options.path=arith.jsonl \\
        --set env.options.reward=my_rewards:correct

The env draws one row per task seed from a local JSONL, CSV or Parquet file, or a folder
written by ``datasets``' ``save_to_disk``; the row's ``prompt_column`` is the observation.
The policy's answer (the action that ``agent.action_format`` reads from its completion) is
scored by the reward function, called as TRL calls one:

    def correct(prompts: list[str], completions: list[str], **columns) -> list[float]:
        return [float(c.strip() == a) for c, a in zip(completions, columns["answer"], strict=True)]

with one prompt and one completion per call, and every other column of the row as a
keyword (a list of one value). The default, ``cairn.envs.dataset:exact_match``, compares
the answer with the ``answer`` column.

Single-turn (``max_turns=1``, the default): the answer ends the episode. Multi-turn: an
answer whose reward is below ``success_reward`` is answered with feedback and the policy
tries again, up to ``max_turns`` answers; the feedback comes from ``feedback``, a function
by import path with the reward function's signature returning one string per completion
(a tool, a checker, a unit-test runner), else it names the reward.

An answer that does not match ``answer_pattern`` (default: up to 200 characters of words,
digits, spaces and common punctuation) is invalid: reward 0, the state unchanged, the
reward function not called. Seeds below ``10**9`` (cairn's train seeds) draw rows from
``path``; the held-out seeds (``eval.seed_offset``, ``10**9`` + i) draw row i of
``eval_path`` when given, else of ``path``. With no ``path``, a built-in arithmetic set
(``arithmetic_rows``) is used, so the env works out of the box.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cairn.envs.base import StepResult, TextEnv

__all__ = [
    "DEFAULT_ANSWER_PATTERN",
    "DatasetEnv",
    "arithmetic_rows",
    "exact_match",
    "import_callable",
    "load_rows",
]

#: Answers that can be scored: words, digits, spaces and common punctuation, 1-200 chars.
DEFAULT_ANSWER_PATTERN = r"[\w .,;:!?+\-*/=()%$'#&@^~|<>]{1,200}"
EVAL_SEEDS = 1_000_000_000  # cairn's held-out seeds start here (eval.seed_offset)
_MAX_VOCAB = 5000
_FEEDBACK = "Your answer scored"  # + the reward: the default answer to a wrong answer


def arithmetic_rows(n: int = 200, seed: int = 0, max_value: int = 20) -> list[dict[str, str]]:
    """``n`` additions and subtractions ``{"prompt": "What is 3 + 4?", "answer": "7"}``."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        a, b = (int(x) for x in rng.integers(0, max_value + 1, size=2))
        op = "+" if rng.random() < 0.5 else "-"
        a, b = (a, b) if op == "+" or a >= b else (b, a)
        rows.append(
            {"prompt": f"What is {a} {op} {b}?", "answer": str(a + b if op == "+" else a - b)}
        )
    return rows


def exact_match(
    prompts: list[str], completions: list[str], **columns: Sequence[object]
) -> list[float]:
    """1.0 where the completion (stripped) equals the row's ``answer`` column, else 0.0."""
    if "answer" not in columns:
        raise ValueError("exact_match needs an 'answer' column; name another reward function")
    return [
        float(c.strip() == str(a).strip())
        for c, a in zip(completions, columns["answer"], strict=True)
    ]


def import_callable(spec: str, what: str) -> Callable[..., object]:
    """The function named ``"package.module:function"``; ValueError naming ``what`` and the
    problem (no colon, no such module, no such attribute, not callable)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} {spec!r} must be an import path 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # an ImportError, or the module itself failing
        raise ValueError(f"{what} {spec!r}: cannot import {module_name!r} ({err})") from None
    fn: object = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"{what} {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise ValueError(f"{what} {spec!r} is not callable")
    return fn


# -- data files -------------------------------------------------------------------------------
_CACHE: dict[tuple[str, float, str | None], list[dict[str, object]]] = {}


def load_rows(path: str | os.PathLike[str], split: str | None = None) -> list[dict[str, object]]:
    """The rows of a JSONL / JSON / CSV / Parquet file or a ``save_to_disk`` folder (cached
    per file and modification time: config checks build the env more than once)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"dataset file {str(path)!r} does not exist")
    key = (str(p.resolve()), p.stat().st_mtime, split)
    if key not in _CACHE:
        rows = _read(p, split)
        if not rows:
            raise ValueError(f"dataset file {str(path)!r} has no rows")
        _CACHE[key] = rows
    return _CACHE[key]


def _read(p: Path, split: str | None) -> list[dict[str, object]]:
    if p.is_dir():
        return _read_saved(p, split)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(p)
    if suffix == ".json":
        data = json.loads(p.read_text(encoding="utf-8"))
        if not (isinstance(data, list) and all(isinstance(r, dict) for r in data)):
            raise ValueError(f"dataset file {str(p)!r}: a .json file must hold a list of objects")
        return data
    if suffix == ".csv":
        with p.open(newline="", encoding="utf-8") as f:
            return [dict(r) for r in csv.DictReader(f)]
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(
                "reading .parquet needs pyarrow (pip install 'cairn-rl[dataset]')"
            ) from None
        return pq.read_table(p).to_pylist()
    raise ValueError(
        f"dataset file {str(p)!r}: unknown format {suffix or '(no suffix)'!r}; "
        "allowed: .jsonl, .json, .csv, .parquet, or a datasets save_to_disk folder"
    )


def _read_jsonl(p: Path) -> list[dict[str, object]]:
    rows = []
    with p.open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"dataset file {str(p)!r} line {i}: not JSON ({err.msg})"
                ) from None
            if not isinstance(row, dict):
                raise ValueError(f"dataset file {str(p)!r} line {i}: not a JSON object")
            rows.append(row)
    return rows


def _read_saved(p: Path, split: str | None) -> list[dict[str, object]]:
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ValueError(
            f"{str(p)!r} is a folder: reading a saved dataset needs datasets "
            "(pip install 'cairn-rl[dataset]')"
        ) from None
    try:
        data = datasets.load_from_disk(str(p))
    except Exception as err:
        raise ValueError(f"{str(p)!r} is not a saved datasets folder ({err})") from None
    if isinstance(data, datasets.DatasetDict):
        name = split or "train"
        if name not in data:
            raise ValueError(f"{str(p)!r} has no split {name!r}; splits: {', '.join(data)}")
        data = data[name]
    return list(data.to_list())


def _prompt_text(value: object) -> str:
    """A prompt cell as text: a string, or TRL's conversational form (a list of messages:
    their contents, one per line)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        return "\n".join(str(m["content"]) for m in value if m.get("role") != "assistant")
    return str(value)


# -- the env ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Task:
    prompt: str
    columns: dict[str, object]


class DatasetEnv(TextEnv):
    """Prompts from a data file, answers scored by a reward function (module docstring).

    Options:
        path: JSONL / JSON / CSV / Parquet file or ``save_to_disk`` folder; None: the
            built-in arithmetic set.
        reward: import path ``module:function`` of the reward function (TRL's signature).
        prompt_column: the column holding the prompt (text, or a list of chat messages).
        feedback: import path of a function answering a wrong answer (multi-turn); None:
            a line naming the reward.
        max_turns: answers per episode (1: single-turn).
        success_reward: a reward at or above it is a success and ends the episode.
        answer_pattern: regular expression a scorable answer matches (stripped, in full);
            None: any non-empty answer up to 10 000 characters.
        instruction: the task instruction above every prompt.
        example_action: the answer shown as the format example; with
            ``example_observation``, a made-up exchange a real model's prompt opens with
            (None: the last row's prompt and ``answer`` column, where it has one).
        example_observation: the prompt that ``example_action`` answers (see above).
        eval_path: the prompts of the held-out seeds (None: ``path``'s).
        split: the split of a saved ``DatasetDict`` (None: ``train``).
    """

    code_options = ("reward", "feedback")  # import paths of functions (module docstring)
    rows: list[_Task]
    eval_rows: list[_Task]
    _task: _Task
    _turn: int
    _done: bool
    _obs: str
    _pattern: re.Pattern[str] | None
    _reward: Callable[..., object]
    _feedback: Callable[..., object] | None

    def __init__(
        self,
        path: str | None = None,
        reward: str = "cairn.envs.dataset:exact_match",
        prompt_column: str = "prompt",
        feedback: str | None = None,
        max_turns: int = 1,
        success_reward: float = 1.0,
        answer_pattern: str | None = DEFAULT_ANSWER_PATTERN,
        instruction: str = "Answer with the final answer only.",
        example_action: str | None = None,
        example_observation: str | None = None,
        eval_path: str | None = None,
        split: str | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
        if not isinstance(success_reward, numbers.Real) or isinstance(success_reward, bool):
            raise ValueError(f"success_reward must be a number, got {success_reward!r}")
        self.max_turns: int = max_turns
        self.success_reward: float = float(success_reward)
        self.prompt_column: str = prompt_column
        self.instruction = instruction
        try:
            self._pattern = re.compile(answer_pattern) if answer_pattern is not None else None
        except re.error as err:
            raise ValueError(f"answer_pattern {answer_pattern!r} is not a regex ({err})") from None
        self._source = str(path) if path is not None else "the built-in arithmetic set"
        rows = load_rows(path, split) if path is not None else arithmetic_rows()
        self.rows = self._check_rows(rows, self._source)
        self.eval_rows = (
            self._check_rows(load_rows(eval_path, split), str(eval_path))
            if eval_path is not None
            else self.rows
        )
        self.reward_name: str = reward
        self.feedback_name: str | None = feedback
        self._reward = import_callable(reward, "reward function")
        self._feedback = import_callable(feedback, "feedback function") if feedback else None
        first, last = self.rows[0], self.rows[-1]
        if example_action is None and "answer" in last.columns:
            # a real model's prompt opens with one exchange (agent.describe_format): the
            # last row answered, which shows the answer format in the task's own terms
            example_action, example_observation = str(last.columns["answer"]), last.prompt
        self.example_action = "answer" if example_action is None else example_action
        self.example_observation = example_observation or ""
        self._task = first
        self._turn, self._done = 0, False
        self._obs = ""
        self._probe(first)

    # -- data ---------------------------------------------------------------------------------
    def _check_rows(self, rows: Sequence[dict[str, object]], source: str) -> list[_Task]:
        if self.prompt_column not in rows[0]:
            raise ValueError(
                f"prompt column {self.prompt_column!r} is not in {source}; "
                f"columns: {', '.join(map(str, rows[0]))}"
            )
        out = []
        for i, row in enumerate(rows):
            if self.prompt_column not in row:
                raise ValueError(f"row {i} of {source} has no {self.prompt_column!r} column")
            columns = {k: v for k, v in row.items() if k != self.prompt_column}
            out.append(_Task(_prompt_text(row[self.prompt_column]), columns))
        return out

    def _call(self, fn: Callable[..., object], name: str, task: _Task, answer: str) -> object:
        columns = {k: [v] for k, v in task.columns.items()}
        values = fn(prompts=[task.prompt], completions=[answer], **columns)
        if isinstance(values, np.ndarray):
            values = values.tolist()
        if not isinstance(values, list | tuple):
            raise ValueError(f"{name} returned a {type(values).__name__}, want a list of 1 value")
        if len(values) != 1:
            raise ValueError(f"{name} returned {len(values)} values for 1 completion")
        return values[0]

    def _score(self, task: _Task, answer: str) -> float:
        name = f"reward function {self.reward_name!r}"
        value = self._call(self._reward, name, task, answer)
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"{name} returned {value!r} ({type(value).__name__}), want a float")
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} returned {value!r}, want a finite float")
        return float(value)

    def _feedback_text(self, task: _Task, answer: str, reward: float) -> str:
        if self._feedback is None:
            return f"{_FEEDBACK} {reward:g}; not yet right. Try again."
        name = f"feedback function {self.feedback_name!r}"
        text = self._call(self._feedback, name, task, answer)
        if not isinstance(text, str):
            raise ValueError(f"{name} returned {text!r} ({type(text).__name__}), want a str")
        return text

    def _probe(self, task: _Task) -> None:
        """Call the reward function once on the first row, so that one returning the wrong
        shape fails when the env is built (the config check), not mid-run."""
        self._score(task, str(task.columns.get("answer", self.example_action)))

    # -- the episode --------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict[str, object]) -> tuple[str, dict[str, Any]]:
        seed = 0 if seed is None else int(seed)
        if seed >= EVAL_SEEDS:
            self._task = self.eval_rows[(seed - EVAL_SEEDS) % len(self.eval_rows)]
        else:
            self._task = self.rows[seed % len(self.rows)]
        self._turn, self._done, self._obs = 0, False, self._task.prompt
        info = self._info(True, False)
        info.update({k: v for k, v in self._task.columns.items() if k in ("answer", "question")})
        return self._obs, info

    def _info(self, valid: bool, success: bool) -> dict[str, Any]:
        return {"anchor": self._obs, "valid": valid, "success": success, "admissible": None}

    def _valid(self, action: str) -> bool:
        text = action.strip()
        if not text or len(text) > 10_000:
            return False
        return self._pattern is None or self._pattern.fullmatch(text) is not None

    def _step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("dataset: the episode has ended; call reset()")
        self._turn += 1
        last = self._turn >= self.max_turns
        if not self._valid(action):
            self._done = last
            return self._obs, 0.0, False, last, self._info(False, False)
        reward = self._score(self._task, action.strip())
        success = reward >= self.success_reward
        self._done = success or last
        if not self._done:
            feedback = self._feedback_text(self._task, action.strip(), reward)
            self._obs = f"{self._task.prompt}\n{feedback}"
        return self._obs, reward, self._done, False, self._info(True, success)

    def gold_action(self) -> str | None:
        """The row's ``answer`` column while the episode is on (None where it has none)."""
        if self._done or "answer" not in self._task.columns:
            return None
        return str(self._task.columns["answer"])

    def vocabulary(self) -> list[str]:
        """Every word of the prompts, string columns and feedback lines (a tiny model's
        word-level tokenizer), or [] (open vocabulary) past 5000 words or with a feedback
        function (whose words are unknown)."""
        if self._feedback is not None:
            return []
        words = {*_FEEDBACK.split(), "not", "yet", "right.", "Try", "again.", "0;", "1;"}
        for task in [*self.rows, *self.eval_rows]:
            words.update(task.prompt.split())
            for value in task.columns.values():
                if isinstance(value, str | int | float):
                    words.update(str(value).split())
            if len(words) > _MAX_VOCAB:
                return []
        return sorted(words)
