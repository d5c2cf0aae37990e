"""What the verl agent loop costs per turn around an env step, on CPU.

    python benchmarks/scale/verl_overhead.py    # writes benchmarks/results/scale/verl_overhead.md
    python benchmarks/scale/verl_overhead.py --quick    # fewer episodes, prints only

Per turn, four timings (median over episodes of seconds / turns, in microseconds):

    env step   ``env.step`` alone, on the same action sequence
    loop       ``play_episode`` (prompt building, tokenising, decoding, parsing, Step
               records) with the env called inline, minus the env step
    agent loop ``CairnAgentLoop.run`` end to end (and the AgentLoopOutput per turn), minus
               the env step, with the env called inline and in a worker thread (the
               default, ``cairn.rollout.env_in_thread``)

The server answers instantly with fixed valid actions (``up``/``left``/``down``/``right``
+ EOS), so no generation time is included: these are what the plug-in adds next to the
model's own generation time. Tokenizer: cairn's local word-level one (a real model's
tokenizer costs more per prompt; the prompt is tokenised once per turn either way).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from cairn.agent import PromptBuilder
from cairn.envs import make
from cairn.integrations.verl.episode import Sample, play_episode
from cairn.policies import local_tokenizer
from cairn.rollout import RolloutSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/_lib
from _lib.records import write_record

ROOT_DIR = Path(__file__).resolve().parents[2]
RESULTS = ROOT_DIR / "benchmarks" / "results" / "scale" / "verl_overhead.md"
ACTIONS = ["up", "left", "down", "right"]
CASES = {
    "sokoban grid 6x6": ("sokoban", {"size": 6, "num_boxes": 1, "max_steps": 20, "render": "grid"}),
    "sokoban compact": ("sokoban", {"size": 6, "num_boxes": 1, "max_steps": 20}),
}


class _Server:
    """``server_manager.generate`` answering fixed actions at once."""

    def __init__(self, tokenizer: Any):
        eos = tokenizer.eos_token_id
        self.ids = itertools.cycle(
            [[*tokenizer.encode(a, add_special_tokens=False), eos] for a in ACTIONS]
        )

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        ids = next(self.ids)
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids))


def _env_only(name: str, options: dict, seed: int, actions: list[str]) -> float:
    env = make(name, **options)
    env.reset(seed=seed)
    start = time.perf_counter()
    for a in actions:
        env.step(a)
    return time.perf_counter() - start


def _loop_only(name: str, options: dict, seed: int, tok: Any) -> tuple[float, list[str]]:
    server = _Server(tok)

    async def generate(prompt_ids: list[int]) -> Sample:
        out = await server.generate("r", prompt_ids=prompt_ids, sampling_params={})
        return Sample(out.token_ids, out.log_probs)

    env = make(name, **options)
    settings = RolloutSettings(max_new_tokens=8, restrict_to_admissible=False)
    start = time.perf_counter()
    episode, _ = asyncio.run(
        play_episode(env, seed, generate, tok, PromptBuilder(history=2), settings)
    )
    return time.perf_counter() - start, [s.action for s in episode.steps]


def _agent_loop(
    name: str, options: dict, seed: int, tok: Any, in_thread: bool
) -> tuple[float, int]:
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from cairn.integrations.verl.agent_loop import CairnAgentLoop

    cfg = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 8}},
         "data": {}, "cairn": {"agent": {"history": 2}, "rollout": {"env_in_thread": in_thread}}}
    )  # fmt: skip
    loop = CairnAgentLoop(
        trainer_config=DictConfigWrap(cfg), server_manager=_Server(tok), tokenizer=tok,
        processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip
    row = {"cairn_env": name, "cairn_options": json.dumps(options), "cairn_seed": seed}
    sampling = {"temperature": 1.0, "top_p": 1.0, "logprobs": True}
    start = time.perf_counter()
    outputs = asyncio.run(loop.run(sampling, **row))
    return time.perf_counter() - start, len(outputs)


def measure(name: str, options: dict, episodes: int) -> dict[str, float]:
    probe = make(name, **options)
    probe.reset(seed=0)
    tok = local_tokenizer(probe, probe.instruction)
    us: dict[str, list[float]] = {"env": [], "loop": [], "inline": [], "thread": []}
    turns = 0
    for seed in range(episodes + 1):
        loop_s, actions = _loop_only(name, options, seed, tok)
        inline_s, n_inline = _agent_loop(name, options, seed, tok, in_thread=False)
        thread_s, n_thread = _agent_loop(name, options, seed, tok, in_thread=True)
        env_s = _env_only(name, options, seed, actions)
        if seed == 0 or not n_inline == n_thread == len(actions):  # warm-up episode
            continue
        per = 1e6 / len(actions)
        us["env"].append(env_s * per)
        for key, total in (("loop", loop_s), ("inline", inline_s), ("thread", thread_s)):
            us[key].append((total - env_s) * per)
        turns += len(actions)
    return {**{k: statistics.median(v) for k, v in us.items()}, "turns": turns}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="5 episodes per case, no file")
    args = p.parse_args(argv)
    episodes = 5 if args.quick else args.episodes
    rows = []
    for label, (name, options) in CASES.items():
        r = measure(name, options, episodes)
        rows.append(
            f"| {label} | {r['turns']} | {r['env']:.0f} | {r['loop']:.0f} | {r['inline']:.0f} "
            f"| {r['thread']:.0f} |"
        )
        print(rows[-1], flush=True)
    if not args.quick:
        _write(rows, episodes)
    return 0


def _write(rows: list[str], episodes: int) -> None:
    text = f"""# verl agent loop: per-turn overhead around an env step (CPU)

`python benchmarks/scale/verl_overhead.py` ({datetime.date.today()}, {
        platform.processor() or platform.machine()
    }, Python {sys.version.split()[0]}, {episodes} episodes per case, history 2,
a server that answers at once). Microseconds per turn, medians over episodes.

| case | turns | env step | loop | agent loop, env inline | agent loop, env in a thread |
|---|---|---|---|---|---|
{chr(10).join(rows)}

"loop" is `play_episode` minus the env step: prompt building, tokenising the prompt,
decoding the sampled ids, parsing the action, the Step record. "agent loop" is
`CairnAgentLoop.run` minus the env step: the same plus one `AgentLoopOutput` per turn,
with the env called inline (`+cairn.rollout.env_in_thread=false`) or in a worker thread
(the default, so that a slow env does not stall the other episodes of verl's event
loop). The difference between the last two columns is the thread hand-off, on a
2-core machine shared with other jobs. Next to a GPU server's generation (milliseconds
to seconds per turn) all of it is small; for envs that step in microseconds (sokoban),
`env_in_thread=false` saves the hand-off.
"""
    write_record(RESULTS, text)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    sys.exit(main())
