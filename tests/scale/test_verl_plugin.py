"""cairn on stock verl, on CPU with verl's own classes: the ``cairn`` agent loop against a
stand-in server that samples with cairn's tiny policy, the ``cairn`` trainer's advantage
hook on a batch laid out as verl's v1 trainer lays it out, and the data builder read by
verl's RLHFDataset. Skipped where verl's optional imports (hydra, datasets, pyarrow,
TransferQueue) are missing; ``make test`` installs them."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch

for _mod in ("verl", "hydra", "datasets", "pyarrow", "transfer_queue", "torchdata", "aiohttp"):
    pytest.importorskip(_mod)

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopOutput,
    DictConfigWrap,
    _agent_loop_registry,
)
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl_standins import PolicyServer, ScriptedPolicy, TQStore  # noqa: E402

from cairn._errors import ConfigError  # noqa: E402
from cairn.advantages import estimate  # noqa: E402
from cairn.agent import PromptBuilder  # noqa: E402
from cairn.cli import main as cli_main  # noqa: E402
from cairn.data.episode import Episode, Step, to_step_batch  # noqa: E402
from cairn.envs import make  # noqa: E402
from cairn.integrations.verl import agent_loop as agent_loop_mod  # noqa: E402
from cairn.integrations.verl import setup  # noqa: E402
from cairn.integrations.verl.agent_loop import CairnAgentLoop, episode_outputs  # noqa: E402
from cairn.integrations.verl.config import cairn_config, check_estimator  # noqa: E402
from cairn.integrations.verl.data import write_dataset  # noqa: E402
from cairn.integrations.verl.episode import TurnTokens  # noqa: E402
from cairn.integrations.verl.trainer import CairnTrainer  # noqa: E402
from cairn.policies import build_policy  # noqa: E402
from cairn.rollout import RolloutSettings, rollout  # noqa: E402
from cairn.train.rollout_sections import ModelConfig  # noqa: E402

ENV_OPTIONS = {"size": 5, "num_boxes": 1, "max_steps": 5, "render": "compact", "max_solution": 3}
RESPONSE_LENGTH = 8
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "logprobs": True}


@pytest.fixture(scope="module")
def policy():
    env = make("sokoban", **ENV_OPTIONS)
    env.reset(seed=0)
    return build_policy(ModelConfig(), env, env.instruction, 0)


def _loop(server, tokenizer, history=1, **cairn):
    # verl trains pretrained models, so agent.describe_format unset means on there; these
    # tests compare with cairn rollouts of the tiny model, whose default is off.
    agent = {"history": history, "describe_format": False, **cairn.pop("agent", {})}
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 512, "response_length": RESPONSE_LENGTH}
            },
            "data": {},
            "cairn": {"agent": agent, **cairn},
        }
    )
    return CairnAgentLoop(
        trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer,
        processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data),
    )  # fmt: skip


def _row(seed, name="sokoban", options=ENV_OPTIONS):
    return {"cairn_env": name, "cairn_options": json.dumps(options), "cairn_seed": seed}


def _play(loop, seed, **row):
    return asyncio.run(loop.run(dict(SAMPLING), **{**_row(seed), **row}))


def test_setup_registers_the_agent_loop_and_the_trainer_mode():
    setup()
    target = f"{CairnAgentLoop.__module__}.CairnAgentLoop"
    assert _agent_loop_registry["cairn"] == {"_target_": target}
    assert get_trainer_cls("cairn") is CairnTrainer


def test_outputs_validate_as_verl_samples_with_model_tokens_only(policy):
    server = PolicyServer(policy, torch.Generator().manual_seed(0))
    outputs = _play(_loop(server, policy.tokenizer), seed=3)
    assert len(outputs) == ENV_OPTIONS["max_steps"]  # the random tiny model never solves it
    for t, out in enumerate(outputs):
        again = AgentLoopOutput.model_validate(out.model_dump())  # verl's own schema
        d = again.as_dict()
        n = len(out.response_ids)
        assert 0 < n <= RESPONSE_LENGTH and out.response_mask == [1] * n  # model tokens in
        assert d["rollout_log_probs"].shape == (n,) and (d["rollout_log_probs"] <= 0).all()
        assert out.prompt_ids == server.prompts[t]  # the ids the server saw are the ones trained
        assert out.extra_fields["cairn_turn"] == t
    # the env's text is never a response token: it is in the next turn's prompt only
    obs_ids = policy.encode(outputs[1].extra_fields["cairn_anchor"])
    assert all(i not in outputs[0].response_ids for i in set(obs_ids) - set(policy.encode("left")))
    assert len({o.extra_fields["cairn_episode"] for o in outputs}) == 1
    assert "reward_extra_info" in outputs[-1].extra_fields  # verl's TQ worker reads it there


def _same_episode(outputs, episode):
    assert len(outputs) == len(episode.steps)
    for out, step in zip(outputs, episode.steps, strict=True):
        f = out.extra_fields
        assert out.prompt_ids == step.prompt_ids
        assert out.response_ids == step.action_ids[:RESPONSE_LENGTH]
        assert out.response_logprobs == step.logprobs[:RESPONSE_LENGTH]
        assert (f["cairn_turn"], f["cairn_anchor"], f["cairn_valid"]) == (
            step.t, step.anchor, step.valid,
        )  # fmt: skip
        assert f["cairn_step_reward"] == step.total_reward
        assert f["cairn_success"] == episode.success
        assert out.reward_score == pytest.approx(episode.ret)


@pytest.mark.parametrize("sampler", ["tiny", "scripted"])
@pytest.mark.parametrize("history", [0, 2])
def test_episodes_equal_cairns_own_rollout(policy, sampler, history):
    # Same seeds, same sampled tokens: cairn's rollout (one episode at a time, so that the
    # generator's draws come in the same order) and the agent loop give the same episodes.
    def sampler_policy():  # a fresh script for each run
        return policy if sampler == "tiny" else ScriptedPolicy(policy, ["up", "left", "down"])

    settings = RolloutSettings(max_new_tokens=RESPONSE_LENGTH, restrict_to_admissible=False)
    builder = PromptBuilder(history=history)
    valid = 0
    for seed in (1, 2, 5):
        env = make("sokoban", **ENV_OPTIONS)
        (episode,) = rollout(
            sampler_policy(), [env], [(0, seed)], builder, settings,
            torch.Generator().manual_seed(seed),
        )  # fmt: skip
        server = PolicyServer(sampler_policy(), torch.Generator().manual_seed(seed))
        _same_episode(_play(_loop(server, policy.tokenizer, history), seed), episode)
        valid += sum(s.valid for s in episode.steps)
    assert (valid > 0) == (sampler == "scripted")  # the scripted run checks valid moves too


def test_chat_template_and_invalid_penalty_match_cairn(policy):
    tok = policy.tokenizer
    tok.chat_template = "{% for m in messages %}user: {{ m['content'] }}{% endfor %} act:"
    try:
        settings = RolloutSettings(
            max_new_tokens=RESPONSE_LENGTH, restrict_to_admissible=False, invalid_penalty=0.3
        )
        env = make("sokoban", **ENV_OPTIONS)
        builder = PromptBuilder(history=1, chat_template=tok)
        gen = torch.Generator().manual_seed(4)
        (episode,) = rollout(policy, [env], [(0, 4)], builder, settings, gen)
        server = PolicyServer(policy, torch.Generator().manual_seed(4))
        loop = _loop(server, tok, history=1, agent={"history": 1, "invalid_penalty": 0.3})
        outputs = _play(loop, 4)
        _same_episode(outputs, episode)
        assert policy.decode(outputs[0].prompt_ids).endswith("act: act:")  # template's "act:"
        assert any(s.penalty == 0.3 for s in episode.steps)
    finally:
        tok.chat_template = None


class _Broken:
    """A sokoban env whose step raises on the second turn."""

    def __init__(self):
        self.env, self.turns = make("sokoban", **ENV_OPTIONS), 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        self.turns += 1
        if self.turns == 2:
            raise RuntimeError("simulator crashed")
        return self.env.step(action)


def test_env_that_raises_is_one_failed_masked_sample(policy, monkeypatch):
    monkeypatch.setattr(agent_loop_mod, "make", lambda name, **o: _Broken())
    monkeypatch.setattr(agent_loop_mod, "_IDLE_ENVS", {})  # no pooled env from other tests
    server = PolicyServer(policy, torch.Generator().manual_seed(0))
    (out,) = _play(_loop(server, policy.tokenizer), seed=3)
    assert out.extra_fields["cairn_failed"]
    assert "simulator crashed" in out.extra_fields["cairn_error"]
    assert out.response_mask == [0] and out.reward_score == 0.0
    assert out.response_logprobs == [0.0]  # same fields as the group's other samples
    AgentLoopOutput.model_validate(out.model_dump())


@pytest.mark.parametrize(
    "row,message",
    [
        ({"cairn_env": "nope"}, "nope"),
        ({"cairn_options": "{size: 5"}, "cairn verl-data"),
        ({"cairn_options": json.dumps({"size": 1})}, "size must be"),
        ({"cairn_seed": "x"}, "cairn verl-data"),
    ],
)
def test_bad_row_is_a_failed_sample_not_a_crash(policy, row, message):
    server = PolicyServer(policy, torch.Generator().manual_seed(0))
    (out,) = _play(_loop(server, policy.tokenizer), seed=0, **row)
    assert out.extra_fields["cairn_failed"] and message in out.extra_fields["cairn_error"]


# -- the trainer's advantage hook ---------------------------------------------------------
def _random_episodes(rng, groups=3, size=4):
    """Episodes of random length, rewards, anchors (shared within a group) and info gain."""
    episodes = []
    for g in range(groups):
        for _ in range(size):
            e = Episode(id=len(episodes), group=g, task=g, success=bool(rng.random() < 0.5))
            for t in range(int(rng.integers(1, 5))):
                n = int(rng.integers(1, RESPONSE_LENGTH + 1))
                e.steps.append(
                    Step(
                        t=t, observation=f"o{t}", anchor=f"g{g}s{int(rng.integers(0, 3))}",
                        action="a", completion="a", reward=float(rng.normal()),
                        valid=bool(rng.random() < 0.8), prompt_ids=[1, 2, 3],
                        action_ids=rng.integers(5, 50, n).tolist(), logprobs=[-0.5] * n,
                        columns={"info_gain": float(rng.normal())},
                    )
                )  # fmt: skip
                e.steps[-1].penalty = 0.0 if e.steps[-1].valid else 0.1
            episodes.append(e)
    return episodes


def _store(episodes, rng, failed=0):
    """Episodes stored as verl's TQ worker stores them; returns (store, keys, key -> row)."""
    store, keys, row_of, row = TQStore(), [], {}, 0
    for e in episodes:
        tokens = TurnTokens([True] * len(e.steps), [{} for _ in e.steps])
        outs = episode_outputs(e, tokens, RESPONSE_LENGTH, {"generate_sequences": 0.0})
        for k in store.put_outputs(outs, uid=f"u{e.group}", session=e.id, global_steps=1):
            keys.append(k)
            row_of[k], row = row, row + 1
    for i in range(failed):
        out = agent_loop_mod.failed_output([[1, 2]], _Tok(), "boom", {}, with_logprobs=True)
        keys += store.put_outputs([out], uid="u0", session=1000 + i)
    keys += store.pad(3)  # verl pads batches to a multiple of the data-parallel size
    perm = rng.permutation(len(keys))  # verl balances the batch: rows arrive in any order
    return store, [keys[i] for i in perm], row_of


class _Tok:
    pad_token_id = 0


def _trainer(name, **options):
    trainer = CairnTrainer.__new__(CairnTrainer)  # the hook only, no Ray workers
    trainer.config = OmegaConf.create({"algorithm": {"rollout_correction": None}})
    trainer.cairn = cairn_config({"cairn": {"advantage": {"name": name, "options": options}}})
    return trainer


@pytest.mark.parametrize(
    "name,options",
    [("grpo", {}), ("rloo", {}), ("gigpo", {"gamma": 0.9}), ("proxmo", {}), ("igpo", {})],
)
def test_advantage_hook_equals_cairn_estimate(name, options, monkeypatch):
    import transfer_queue as tq

    rng = np.random.default_rng(0)
    episodes = _random_episodes(rng)
    store, keys, row_of = _store(episodes, rng, failed=2)
    monkeypatch.setattr(tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", store.kv_batch_put)
    metrics = {}
    _trainer(name, **options)._compute_advantage(store.batch(keys), metrics)
    want = estimate(name, to_step_batch(episodes), **options)
    assert np.abs(want).max() > 0.1  # a batch where the estimator has something to say
    for key in keys:
        adv, resp = store.rows[key]["advantages"], store.rows[key]["responses"]
        assert adv.shape == resp.shape  # one advantage per response token
        expected = want[row_of[key]] if key in row_of else 0.0  # failed samples: 0
        torch.testing.assert_close(adv, torch.full_like(adv, expected), atol=1e-6, rtol=0)
        assert torch.equal(store.rows[key]["returns"], adv)
    assert metrics["cairn/failed_episodes"] == 2 and metrics["cairn/episodes"] == len(episodes)


def test_gae_reads_the_critics_values_and_returns_a_plus_v(monkeypatch):
    import transfer_queue as tq

    rng = np.random.default_rng(2)
    episodes = _random_episodes(rng)
    store, keys, row_of = _store(episodes, rng)
    values = rng.normal(size=len(row_of))  # V before each step, at its first response token
    for k, row in row_of.items():
        n = len(store.rows[k]["responses"])
        store.rows[k]["values"] = torch.full((n,), float(values[row]))
    for k in store.padding:  # verl's critic scores padding samples too
        store.rows[k]["values"] = torch.zeros(1)
    monkeypatch.setattr(tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", store.kv_batch_put)
    _trainer("gae", gamma=0.9, lam=0.8)._compute_advantage(store.batch(keys), {})
    batch = to_step_batch(episodes, value=values)
    want = estimate("gae", batch, gamma=0.9, lam=0.8)
    for k, row in row_of.items():
        adv, ret = store.rows[k]["advantages"], store.rows[k]["returns"]
        torch.testing.assert_close(adv, torch.full_like(adv, want[row]), atol=1e-5, rtol=0)
        target = want[row] + values[row]  # GAE's return, the critic's target
        torch.testing.assert_close(ret, torch.full_like(ret, target), atol=1e-5, rtol=0)


def test_estimator_missing_a_column_says_where_verl_gets_it():
    from cairn.integrations.verl.trainer import step_advantages

    episodes = _random_episodes(np.random.default_rng(3))
    for e in episodes:
        for s in e.steps:
            s.columns = {}  # an env that reports no info gain
    tokens = [TurnTokens([True] * len(e.steps), [{} for _ in e.steps]) for e in episodes]
    outs = [o for e, t in zip(episodes, tokens, strict=True) for o in episode_outputs(e, t, 8, {})]
    uid = [f"u{e.group}" for e in episodes for _ in e.steps]
    cfg = cairn_config({"cairn": {"advantage": {"name": "igpo"}}})
    with pytest.raises(
        ValueError, match=r"needs StepBatch column\(s\) \['info_gain'\].*info\['info_gain'\]"
    ):
        step_advantages(cfg, uid, [o.extra_fields for o in outs])


def test_rollout_correction_runs_beside_cairns_advantage(monkeypatch):
    import transfer_queue as tq

    rng = np.random.default_rng(1)
    store, keys, row_of = _store(_random_episodes(rng), rng)
    for k in keys:
        store.rows[k]["old_log_probs"] = store.rows[k]["rollout_log_probs"] - 0.1
    monkeypatch.setattr(tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", store.kv_batch_put)
    trainer = _trainer("gigpo")
    trainer.config = OmegaConf.create(
        {"algorithm": {"rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0,
                                               "rollout_rs": None, "bypass_mode": False}}}
    )  # fmt: skip
    metrics = {}
    trainer._compute_advantage(store.batch(keys), metrics)
    weights = store.rows[next(iter(row_of))]["rollout_is_weights"]
    torch.testing.assert_close(weights, torch.full_like(weights, float(np.exp(-0.1))))
    assert any(k.startswith("rollout_corr/") for k in metrics)


@pytest.mark.parametrize(
    "name,options,match",
    [
        ("treepo", {}, "branching rollouts"),
        ("elpo", {}, "branching rollouts"),
        ("arpo", {"attribution": "hard"}, "branching rollouts"),
        ("gae", {}, "critic.enable=true"),
    ],
)
def test_estimators_verl_cannot_feed_fail_at_config_time(name, options, match):
    cfg = {"cairn": {"advantage": {"name": name, "options": options}}}
    with pytest.raises(ConfigError, match=match):
        check_estimator(cairn_config(cfg), has_values=False)
    verl_cfg = OmegaConf.create(
        {**cfg, "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
         "critic": {"enable": False}}
    )  # fmt: skip
    with pytest.raises(ConfigError, match=match):
        CairnTrainer(verl_cfg)  # before any worker starts


def test_bad_cairn_block_names_the_key():
    with pytest.raises(ConfigError, match=r"cairn\.agent\.history"):
        cairn_config({"cairn": {"agent": {"history": -1}}})
    with pytest.raises(ConfigError, match=r"cairn\.agnt: .* allowed: agent, rollout, advantage"):
        cairn_config({"cairn": {"agnt": {}}})
    with pytest.raises(ConfigError, match="allowed: max_turns, max_new_tokens, stop"):
        cairn_config({"cairn": {"rollout": {"turns": 3}}})
    with pytest.raises(ConfigError, match="unknown"):
        cairn_config({"cairn": {"advantage": {"name": "nope"}}})


def test_a_stop_that_cuts_the_closing_tag_is_refused_as_in_cairn_train():
    block = {"agent": {"action_format": "tagged"}, "rollout": {"stop": ["</action>"]}}
    with pytest.raises(ConfigError, match=r"rollout\.stop '</action>' cuts every completion"):
        cairn_config({"cairn": block})
    cairn_config({"cairn": {**block, "agent": {"action_format": "tool_call"}}})  # may stay open


# -- data ------------------------------------------------------------------------------------
def test_parquet_loads_with_rlhfdataset_and_feeds_the_agent_loop(policy, tmp_path):
    options = {**ENV_OPTIONS, "render": "grid"}
    paths = write_dataset("sokoban", options, train=3, val=2, out=tmp_path / "d")
    cfg = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts": False})
    train = RLHFDataset([str(paths["train"])], policy.tokenizer, cfg)
    val = RLHFDataset([str(paths["val"])], policy.tokenizer, cfg)
    assert (len(train), len(val)) == (3, 2)
    row = train[1]
    assert (row["agent_name"], row["cairn_env"], row["cairn_seed"]) == ("cairn", "sokoban", 1)
    assert json.loads(row["cairn_options"]) == options and row["index"] == 1
    assert row["raw_prompt"][0]["role"] == "user" and val[0]["cairn_seed"] == 1_000_000_000
    server = PolicyServer(policy, torch.Generator().manual_seed(0))
    kwargs = {k: v for k, v in row.items() if k.startswith("cairn_") or k == "raw_prompt"}
    outputs = asyncio.run(_loop(server, policy.tokenizer).run(dict(SAMPLING), **kwargs))
    assert outputs and not outputs[0].extra_fields["cairn_failed"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["sokobn"], "unknown env 'sokobn'; available:"),
        (["sokoban", "--set", "env.options.size=1"], "size must be an int >= 3"),
        (["sokoban", "--set", "env.options.colour=red"], "has no option 'colour'"),
        (["sokoban", "--set", "model.path=x"], "env.options.KEY=VALUE only"),
    ],
)
def test_verl_data_rejects_bad_input_with_one_line(args, message, tmp_path, capsys):
    out = tmp_path / "d"
    code = cli_main(["verl-data", *args, "--train", "2", "--val", "1", "--out", str(out)])
    err = capsys.readouterr().out
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # nothing half-written


def test_verl_data_cli_writes_both_splits(tmp_path):
    out = tmp_path / "d"
    args = ["verl-data", "sokoban", "--train", "4", "--val", "2", "--out", str(out)]
    assert cli_main([*args, "--set", "env.options.render=grid"]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(out / "train.parquet").to_pylist()
    assert [r["cairn_seed"] for r in table] == [0, 1, 2, 3]
    assert json.loads(table[0]["cairn_options"]) == {"render": "grid"}
    assert pq.read_table(out / "val.parquet").num_rows == 2


# -- the example and the Ray hook ----------------------------------------------------------
def _example_overrides() -> list[str]:
    """The Hydra overrides of examples/verl/run_sokoban_gigpo.sh, its variables filled in."""
    import re
    import shlex
    from pathlib import Path

    script = Path(__file__).parents[2] / "examples" / "verl" / "run_sokoban_gigpo.sh"
    body = script.read_text().split("-m verl.trainer.main_ppo")[1].split('"$@"')[0]
    env = {"DATA": "/data", "MODEL": "/model", "NGPUS": "8", "STEPS": "2"}
    body = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], body)
    return shlex.split(body.replace("\\\n", " "))


def _gpu_check_verl():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "scale" / "gpu_check_verl.py"
    spec = importlib.util.spec_from_file_location("gpu_check_verl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("short_run", [False, True])  # True: as gpu_check.sh runs it
def test_example_overrides_compose_and_pass_verls_config_checks(short_run):
    from pathlib import Path

    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    extra = _gpu_check_verl().SMALL_RUN if short_run else []
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose("ppo_trainer", overrides=[*_example_overrides(), *extra])
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=False)
    assert cfg.trainer.v1.trainer_mode == "cairn" and cfg.trainer.use_v1
    hook = cfg.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook
    assert hook == "cairn.integrations.verl.setup"
    block = cairn_config(cfg)
    assert (block.advantage.name, block.agent.history) == ("gigpo", 2)
    check_estimator(block, has_values=need_critic(cfg))
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "cairn"
    assert block.rollout.max_new_tokens == (8 if short_run else 64)
    # verl builds the trainer from this config (its workers start later, in init()):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    OmegaConf.resolve(cfg)
    trainer = CairnTrainer(cfg)
    assert type(trainer.replay_buffer) is ReplayBuffer  # the sync trainer's, not the async one
    assert trainer.cairn.advantage.options == {"gamma": 0.95}


def test_gpu_check_reads_verls_console_metrics():
    # verl's console logger: "step:N - key:value - ..." (verl.utils.logger.aggregate_logger)
    log = "noise\nstep:1 - cairn/success:0.25 - perf/throughput:1234.5 - other:3\nstep:2 - x:1"
    rows = _gpu_check_verl().metrics(log)
    assert rows == [{"step": 1.0, "cairn/success": 0.25, "perf/throughput": 1234.5}, {"step": 2.0}]


@pytest.mark.slow
def test_ray_setup_hook_registers_cairn_in_every_worker():
    # What verl's launch relies on: its TaskRunner and agent-loop workers are Ray actors.
    import ray

    ray.init(
        num_cpus=1, include_dashboard=False,
        runtime_env={"worker_process_setup_hook": "cairn.integrations.verl.setup"},
    )  # fmt: skip
    try:

        @ray.remote
        def probe():  # a fresh worker process: only the hook can have registered cairn
            from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
            from verl.trainer.ppo.v1 import get_trainer_cls

            return get_trainer_cls("cairn").__name__, _agent_loop_registry.get("cairn")

        name, entry = ray.get(probe.remote())
    finally:
        ray.shutdown()
    assert name == "CairnTrainer" and entry["_target_"].endswith("CairnAgentLoop")


def test_loop_to_hook_on_cpu_equals_cairns_rollout_and_estimate(policy, monkeypatch):
    # The whole CPU path: rows -> agent loop (stand-in server) -> verl's TQ postprocess ->
    # the cairn trainer's hook; against cairn's own rollout and estimator on the same tokens.
    import transfer_queue as tq

    settings = RolloutSettings(max_new_tokens=RESPONSE_LENGTH, restrict_to_admissible=False)
    store, keys, episodes = TQStore(), [], []
    for group, seed in enumerate((7, 8)):
        for session in range(3):
            script = [*["up", "left", "down", "right"][session:], "up"]
            env = make("sokoban", **ENV_OPTIONS)
            (episode,) = rollout(
                ScriptedPolicy(policy, script), [env], [(group, seed)], PromptBuilder(history=1),
                settings, first_episode_id=len(episodes),
            )  # fmt: skip
            episodes.append(episode)
            server = PolicyServer(ScriptedPolicy(policy, script))
            outputs = _play(_loop(server, policy.tokenizer), seed)
            keys += store.put_outputs(outputs, uid=f"row{seed}", session=session, **_row(seed))
    monkeypatch.setattr(tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", store.kv_batch_put)
    metrics = {}
    _trainer("gigpo")._compute_advantage(store.batch(keys), metrics)
    want = estimate("gigpo", to_step_batch(episodes))
    got = np.array([float(store.rows[k]["advantages"][0]) for k in keys])
    np.testing.assert_allclose(got, want, atol=1e-6)  # keys are in episode, turn order
    assert np.abs(want).max() > 0 and metrics["cairn/episodes"] == 6
    assert metrics["cairn/success"] == np.mean([e.success for e in episodes])
