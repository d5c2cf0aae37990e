"""verl train/val data for a cairn env: one parquet row per task instance (``cairn verl-data``).

Each row, as verl's ``RLHFDataset`` reads it:

    data_source    "cairn/<env>"
    agent_name     "cairn" (the agent loop that plays it)
    prompt         [{"role": "user", "content": <the first turn's prompt>}] (for verl's
                   prompt-length filter and logs; the agent loop builds its own prompts),
                   with the instruction of the ``cairn.agent`` block given (``--set
                   agent.instruction=...``), as the agent loop's turns have it
    cairn_env      env name            cairn_options  env options as JSON text
    cairn_seed     the task seed       extra_info     {"index": i, "split": "train"/"val"}
    reward_model   {"style": "env", "ground_truth": ""} (the env scores; no reward model)

Train seeds are ``seed_start + i``; val seeds are cairn's held-out seeds
(``1_000_000_000 + i``, as ``cairn train`` evaluates). Every env, option set and seed is
built and reset here, so a bad one fails now with a clear message, not inside a verl run.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn._errors import ConfigError
from cairn.agent import PromptBuilder
from cairn.envs import available, make, validate_options

if TYPE_CHECKING:
    from cairn.envs import TextEnv

__all__ = ["VAL_SEED_OFFSET", "dataset_rows", "write_dataset"]

VAL_SEED_OFFSET = 1_000_000_000  # cairn's held-out seeds (eval.seed_offset)
# Rows per split: each holds a first-turn prompt (~1 KB) and is built in memory before the
# parquet is written, so 1,000,000 rows take ~1-2 GB; more is refused before any work.
MAX_ROWS = 1_000_000


def _check_env(name: str, options: Mapping[str, object]) -> TextEnv:
    if name not in available():
        raise ConfigError(f"unknown env {name!r}; available: {', '.join(available())}")
    try:
        validate_options(name, options)
        return make(name, **options)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"env {name!r} options {options}: {err}") from None


def dataset_rows(
    name: str,
    options: Mapping[str, object],
    seeds: list[int],
    split: str,
    history: int = 0,
    agent: Mapping[str, object] | None = None,
) -> list[dict[str, Any]]:
    """The rows of one split (see the module docstring); resets the env on every seed.
    ``agent``: the ``cairn.agent`` block the agent loop will run with; the row's prompt
    starts with its instruction (``cairn.rollout.turn.instruction_for``, as every turn's)."""
    from cairn.integrations.verl.config import cairn_config  # torch: not at CLI start
    from cairn.rollout.turn import instruction_for

    settings = cairn_config({"cairn": {"agent": agent or {}}}).settings(1, 1.0, 1.0)
    env = _check_env(name, options)
    prompt = PromptBuilder(history=history)
    options_json = json.dumps(options, sort_keys=True)
    rows = []

    def first_prompt(env: TextEnv, obs: str) -> str:
        return prompt.build(instruction_for(env, settings), [], obs)

    try:
        for i, seed in enumerate(seeds):
            try:
                obs, _ = env.reset(seed=seed)
            except Exception as err:
                raise ConfigError(
                    f"env {name!r} with options {options} fails to reset on seed {seed}: "
                    f"{type(err).__name__}: {err}"
                ) from None
            rows.append(
                {
                    "data_source": f"cairn/{name}",
                    "agent_name": "cairn",
                    "prompt": [{"role": "user", "content": first_prompt(env, obs)}],
                    "cairn_env": name,
                    "cairn_options": options_json,
                    "cairn_seed": int(seed),
                    "reward_model": {"style": "env", "ground_truth": ""},
                    "extra_info": {"index": i, "split": split},
                }
            )
    finally:
        env.close()
    return rows


def write_dataset(
    name: str,
    options: Mapping[str, object],
    train: int,
    val: int,
    out: str | Path,
    seed_start: int = 0,
    agent: Mapping[str, object] | None = None,
) -> dict[str, Path]:
    """Write ``out/train.parquet`` and ``out/val.parquet``; returns their paths (``agent``:
    the ``cairn.agent`` block, for the rows' prompts)."""
    if train < 1 or val < 1:
        raise ConfigError(f"--train and --val must be >= 1, got {train} and {val}")
    if max(train, val) > MAX_ROWS:
        raise ConfigError(f"--train and --val: at most {MAX_ROWS} rows each, got {train} and {val}")
    _check_out(Path(out))
    if seed_start < 0 or seed_start + train > VAL_SEED_OFFSET:
        raise ConfigError(f"train seeds must lie in [0, {VAL_SEED_OFFSET}); got start {seed_start}")
    seeds = {
        "train": list(range(seed_start, seed_start + train)),
        "val": [VAL_SEED_OFFSET + i for i in range(val)],
    }
    rows = {split: dataset_rows(name, options, s, split, agent=agent) for split, s in seeds.items()}
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("cairn verl-data writes parquet: pip install pyarrow") from None
    out = Path(out)
    out.mkdir(exist_ok=True)
    paths = {split: out / f"{split}.parquet" for split in rows}
    for split, split_rows in rows.items():
        pq.write_table(pa.Table.from_pylist(split_rows), paths[split])
    return paths


def _check_out(out: Path) -> None:
    """``out`` is a folder, or a name for a new one in a folder that exists."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: a file is there; give a folder (new or existing)")
    if not out.exists() and not out.parent.is_dir():
        raise ConfigError(f"--out {out}: its parent folder {out.parent} does not exist")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``cairn verl-data ENV --train N --val M --out DIR [--set env.options.k=v]``."""
    d = sub.add_parser("verl-data", help="write verl train/val parquet for a cairn env")
    d.add_argument("env", help="registered env name (cairn.envs.available())")
    d.add_argument(
        "--train", type=int, required=True, help=f"train task instances (at most {MAX_ROWS})"
    )
    d.add_argument(
        "--val", type=int, required=True, help=f"held-out task instances (at most {MAX_ROWS})"
    )
    d.add_argument(
        "--out", required=True, help="folder for train.parquet and val.parquet (its parent exists)"
    )
    d.add_argument("--seed-start", type=int, default=0, help="first train seed")
    d.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def command(args: argparse.Namespace) -> int:
    """Run ``cairn verl-data``: ``env.options.*`` and ``agent.*`` overrides are accepted."""
    from cairn.train.configfile import apply_overrides

    data: dict[str, Any] = {"env": {"options": {}}, "agent": {}}
    apply_overrides(data, args.overrides)
    extra = sorted(set(data) - {"env", "agent"}) + sorted(set(data["env"]) - {"options"})
    if extra:
        raise ConfigError(
            "verl-data takes --set env.options.KEY=VALUE only, or agent.KEY=VALUE (the "
            f"cairn.agent block the run will use, for the prompts); got {extra}"
        )
    paths = write_dataset(
        args.env, data["env"]["options"], args.train, args.val, args.out, args.seed_start,
        agent=data["agent"],
    )  # fmt: skip
    print(f"train: {paths['train']} ({args.train} rows)\nval: {paths['val']} ({args.val} rows)")
    return 0
