"""Train from Python: your own prompts (a JSONL file) and reward function, and a callback
that logs each iteration your way. Run from anywhere:

    python examples/train_from_python.py                   # tiny model, a few minutes
    python examples/train_from_python.py --smol            # SmolLM2-135M-Instruct + LoRA
    python examples/train_from_python.py --set train.iterations=2 --out /tmp/runs

The reward function is named by import path ("module:function"), as a config names it;
here it lives in this script, so its path is ``__main__:correct``. In your own project,
put it in a module on PYTHONPATH (``my_rewards:correct``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import cairn
from cairn.envs.dataset import arithmetic_rows


def correct(
    prompts: list[str], completions: list[str], answer: list[str], **columns: Any
) -> list[float]:
    """TRL's reward signature: one float per completion; ``answer`` is the file's column."""
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer, strict=True)]


class PrintSuccess(cairn.train.Callback):
    """Custom logging: one short line per iteration, and the held-out success at the end."""

    def on_iteration(self, metrics: dict[str, Any]) -> None:
        print(f"iteration {metrics['iteration']}: success {metrics['rollout/success']:.2f}")

    def on_train_end(self, summary: dict[str, Any]) -> None:
        print(f"held-out success {summary['eval_success']}")


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs", help="folder for the data file and the run")
    parser.add_argument("--smol", action="store_true", help="SmolLM2 instead of the tiny model")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "arith.jsonl"  # {"prompt": "What is 3 + 4?", "answer": "7"} per line
    data.write_text("".join(json.dumps(row) + "\n" for row in arithmetic_rows(200)))

    result = cairn.train(
        "dataset_smol" if args.smol else "dataset_grpo",
        overrides=[
            f"env.options.path={data}",
            f"env.options.reward={__name__}:correct",
            f"out_dir={out}",
            *args.overrides,
        ],
        callbacks=[PrintSuccess()],
    )
    print(f"run folder: {result.run_dir}")
    return result.run_dir


if __name__ == "__main__":
    main()
