"""What a trainer is built from, as one object: ``TrainParts``.

``build_parts(cfg, run_dir, dist, ckpt)`` first reads what each lower layer is given
from the config (``cairn.train.settings``: the env factories and pool settings, the
prompt words, the prompt builder's keys, the sampling settings; no draw), then builds, in
this order (the order fixes every random draw a build makes, so it is part of the
records): the two env pools (training, held-out eval), the policy and its token budgets,
its generation engine, the KL reference model, the prompt builder, the actor's optimizer
and the ``Actor``, the learners beside it (a critic), the rollout strategy, the
exploration methods wrapped around it, and the rewards.

The parts hold the run's learned and accumulated state besides the weights:
``state_dict()`` is the parts' share of a checkpoint's trainer state (the optimizers, the
KL reference, exploration, rewards; ``cairn.train.checkpoint.schema`` names the keys) and
``load_state_dict`` puts it back, checking first, before anything changes, that every
optimizer state fits this run's parameters. The counters and random streams are the
loop's (``cairn.train.checkpoint.state.TrainState``); ``cairn.train.checkpoint.resume``
joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import torch

from cairn.agent import PromptBuilder, prompt_for_env
from cairn.exploration import Exploration
from cairn.losses import LossConfig
from cairn.policies import build_policy
from cairn.policies.budget import context_budget
from cairn.policies.engines import Engine, make_engine
from cairn.policies.hf import HFPolicy
from cairn.policies.lora import has_adapters, reference_model
from cairn.rewards import RewardContext, RewardFn, make_reward
from cairn.rollout import (
    EnvFactory,
    EnvPool,
    RolloutSettings,
    Strategy,
    WorkerPool,
    make_env_pool,
    make_strategy,
)
from cairn.rollout.envpool.calls import GuardedEnv
from cairn.train.checkpoint.resume import check_optimizer
from cairn.train.checkpoint.state import put
from cairn.train.curriculum import Curriculum, make_curriculum
from cairn.train.distributed import Dist
from cairn.train.learners import Actor, SideLearner, build_learners
from cairn.train.schema import Config
from cairn.train.settings import (
    config_env_factory,
    pool_settings,
    prompt_settings,
    prompt_words,
    sampling_settings,
    turns_extend,
)
from cairn.train.token_budget import budget_check

if TYPE_CHECKING:
    from cairn.envs import TextEnv

__all__ = ["TrainParts", "build_parts"]


@dataclass(eq=False)
class TrainParts:
    """A trainer's parts (module docstring); ``cairn.train.trainer.Trainer`` reads them by
    name (``trainer.policy`` is ``trainer.parts.policy``)."""

    env_factory: EnvFactory  # the config's env (evaluation's; training's without curriculum)
    workers: tuple[
        int, str, float | None, float
    ]  # the env pools' settings (workers, backend, timeout, faults)
    curriculum: (
        Curriculum | None
    )  # cairn.train.curriculum's, or None; its level's env options train
    train_envs: EnvPool | WorkerPool
    eval_envs: EnvPool | WorkerPool
    policy: HFPolicy
    engine: Engine
    prompt: PromptBuilder
    opt: torch.optim.Optimizer  # the actor's
    ref_model: torch.nn.Module | None  # the KL reference (None without a KL penalty)
    actor: Actor
    learners: list[SideLearner]  # beside the actor, each with its own optimizer
    sampling: RolloutSettings
    strategy: Strategy  # the rollout strategy, exploration hooks around it
    exploration: Exploration
    rewards: list[RewardFn]
    reward_ctx: RewardContext

    def state_dict(self) -> dict[str, Any]:
        """The parts' share of a checkpoint's trainer state."""
        ref = self.ref_model
        return {
            "optimizer": self.opt.state_dict(),
            "ref_model": ref.state_dict() if ref is not None else None,
            **{f"{x.name}_optimizer": x.opt.state_dict() for x in self.learners},
            "exploration": self.exploration.state_dict(),
            "rewards": [_reward_state(r) for r in self.rewards],
            **({"curriculum": self.curriculum.state_dict()} if self.curriculum else {}),
        }

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """CheckpointError (one line, naming the key) unless every optimizer state of
        ``state`` fits this run's parameters; changes nothing."""
        check_optimizer(self.opt, state["optimizer"], "optimizer")
        for x in self.learners:
            check_optimizer(x.opt, state.get(f"{x.name}_optimizer"), f"{x.name}_optimizer")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put ``state`` (``state_dict``'s keys) back, checked first (``check_state_dict``);
        an error while putting a part back is a CheckpointError naming its key."""
        self.check_state_dict(state)
        put("optimizer", self.opt.load_state_dict, state["optimizer"])
        if self.ref_model is not None and state["ref_model"] is not None:
            put("ref_model", self.ref_model.load_state_dict, state["ref_model"])
        for x in self.learners:
            if state.get(f"{x.name}_optimizer") is not None:
                put(f"{x.name}_optimizer", x.opt.load_state_dict, state[f"{x.name}_optimizer"])
        if "exploration" in state:
            put("exploration", self.exploration.load_state_dict, state["exploration"])
        if self.curriculum is not None and state.get("curriculum") is not None:
            level = self.curriculum.level
            put("curriculum", self.curriculum.load_state_dict, state["curriculum"])
            new, self.curriculum.level = self.curriculum.level, level
            self.set_curriculum_level(new)  # the saved level's training envs
        saved_rewards = state.get("rewards", [])
        for i, (reward, saved) in enumerate(zip(self.rewards, saved_rewards, strict=False)):
            if saved is not None:
                put(f"rewards[{i}]", _load_reward, reward, saved)

    def train_factory(self) -> EnvFactory:
        """The training envs' factory: ``env.options``, or the curriculum level's over them."""
        return _train_factory(self.env_factory, self.curriculum)

    def set_curriculum_level(self, level: int) -> None:
        """Train at curriculum ``level`` from now on: new training envs at its options."""
        if self.curriculum is None:
            raise ValueError("set_curriculum_level: this run has no curriculum")
        changed = level != self.curriculum.level
        self.curriculum.level = level
        if changed:
            self.train_envs.close()
            self.train_envs = make_env_pool(self.train_factory(), *self.workers)

    def refresh_reference(self) -> None:
        """After the weights changed outside RL (the warm-up): the KL reference becomes a
        frozen copy of the new weights (LoRA's reference, the base with adapters off,
        follows by itself), and the engine samples with them."""
        if self.ref_model is not None and not has_adapters(self.policy.model):
            self.ref_model = reference_model(self.policy.model).requires_grad_(False)
        self.engine.sync()  # vllm: the new weights to the sampler

    def close(self) -> None:
        """Stop the engine, the env pools (their workers) and the exploration methods."""
        self.engine.close()
        self.train_envs.close()
        self.eval_envs.close()
        self.exploration.close()


def _train_factory(env: EnvFactory, curriculum: Curriculum | None) -> EnvFactory:
    if curriculum is None:
        return env
    return replace(env, options=curriculum.env_options(env.options))


def build_parts(cfg: Config, run_dir: Path, dist: Dist, ckpt: Path | None) -> TrainParts:
    """A trainer's parts for ``cfg`` (module docstring: what, in which order); the weights
    and the learners' from ``ckpt`` when given (the rest of its state: ``load_state_dict``).

    The config is read first, in one place (``cairn.train.settings``: what each lower layer
    is given), and then handed down: the envs, the policy and its engine, the prompt
    builder, then the learners on top of the policy. A probe env that fails raises an
    ``EnvFault`` naming the env and the call (no rollout to drop it from)."""
    env_factory = config_env_factory(cfg)  # workers: registration and plugins too
    eval_factory = config_env_factory(cfg, held_out=True)  # eval.env_options: a test split
    workers = pool_settings(cfg)
    words, extend = prompt_words(cfg), turns_extend(cfg)
    prompt_options = prompt_settings(cfg)
    sampling = sampling_settings(cfg)  # its context budget once the policy exists
    loss_cfg = LossConfig(**cfg.model_dump()["loss"])
    # A curriculum trains at its level's env options (``TrainParts.train_factory``).
    curriculum = make_curriculum(cfg.curriculum.name, cfg.curriculum.options)
    train_factory = env_factory
    if curriculum is not None:
        train_factory = replace(env_factory, options=curriculum.env_options(env_factory.options))
    train_envs = make_env_pool(train_factory, *workers)
    eval_envs = make_env_pool(eval_factory, *workers)
    # The policy is built for a probe env's instruction and vocabulary (the tiny default's
    # tokenizer); the weights are rank 0's on every rank.
    probe = (train_envs if curriculum is None else eval_envs).take(1)[0]
    probe = cast("TextEnv", GuardedEnv(probe, cfg.env.name))  # a proxy: faults named
    probe.reset(seed=0)
    instruction = cfg.agent.instruction or probe.instruction
    policy = build_policy(cfg.model, probe, instruction, cfg.seed, ckpt, words, extend)
    dist.broadcast_params(policy.model)
    if cfg.model.path is not None:
        budget_check(cfg, policy.tokenizer)
    budget = context_budget(policy, cfg.model.max_context, cfg.rollout.max_new_tokens)
    engine_dir = run_dir / "engine" / f"rank{dist.rank}"
    r = cfg.rollout
    engine = make_engine(r.engine, policy, r.engine_options, engine_dir, r.temperature)
    policy = engine.policy  # vllm: samples on vLLM, scores on the HF model
    # The KL reference: LoRA's base with adapters off (no copy), else a frozen copy.
    ref = reference_model(policy.model) if loss_cfg.kl_coef > 0 else None
    ref_model = ref.requires_grad_(False) if ref is not None else None
    prompt = prompt_for_env(policy.tokenizer, probe, **prompt_options)
    params, o = policy.model.parameters(), cfg.optim
    opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay)
    actor = Actor(policy, opt, engine, loss_cfg, dist, cfg)
    learners = build_learners(cfg, policy, ckpt)
    strategy = make_strategy(cfg.rollout.strategy, **cfg.rollout.options)
    # Exploration methods hook around the strategy (``sample``); the rewards follow.
    exploration = Exploration(
        cfg.exploration, policy=policy, prompt=prompt, env_factory=env_factory,
        run_dir=run_dir, seed=cfg.seed,
    )  # fmt: skip
    rewards = [make_reward(x.name, **x.options) for x in cfg.rewards]
    return TrainParts(
        env_factory=env_factory, workers=workers, curriculum=curriculum,
        train_envs=train_envs, eval_envs=eval_envs, policy=policy,
        engine=engine, prompt=prompt, opt=opt, ref_model=ref_model, actor=actor,
        learners=learners, sampling=replace(sampling, context_budget=budget),
        strategy=exploration.wrap(strategy), exploration=exploration, rewards=rewards,
        reward_ctx=RewardContext(policy=policy, prompt=prompt),
    )  # fmt: skip


@runtime_checkable
class _Stateful(Protocol):
    """A reward with a state (a count-based bonus keeps its table of states and counts)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def _reward_state(reward: object) -> dict[str, Any] | None:
    """A reward's state; None when it keeps none."""
    return reward.state_dict() if isinstance(reward, _Stateful) else None


def _load_reward(reward: object, saved: dict[str, Any]) -> None:
    if not isinstance(reward, _Stateful):
        raise TypeError(f"this run's reward {type(reward).__name__} keeps no state")
    reward.load_state_dict(saved)
