"""verl agent loop ``cairn``: one dataset row -> one cairn episode -> one verl sample per turn.

A row (``cairn verl-data``) names the env, its options (JSON) and the task seed:
``cairn_env``, ``cairn_options``, ``cairn_seed``. ``run`` builds the env, plays the episode
with ``episode.play_episode`` (cairn's own turn, ``cairn.rollout.turn``: every ``cairn.agent``
key means what it means in ``cairn train``; the prompt builder is ``cairn train``'s, with
``prompt_style`` and the tokenizer's chat template; the context budget is
``rollout.prompt_length``), generating with ``self.server_manager.generate`` (token ids in,
token ids and log-probs out, one request id for all the episode's turns), and returns a
list of ``AgentLoopOutput``, one per turn:

    prompt_ids        the turn's prompt ids, exactly those sent to the server
    response_ids      the ids the server sampled (cut at rollout.response_length)
    response_mask     1 for every response id (a turn holds model tokens only; env text
                      lives in the next turn's prompt, which is never trained)
    response_logprobs the sampled ids' log-probs, when the server returned them
    reward_score      the episode's return (verl copies the last sample's to the others)
    extra_fields      cairn_episode, cairn_turn, cairn_anchor, cairn_step_reward
                      (env reward - invalid penalty), cairn_success, cairn_valid,
                      cairn_failed, cairn_info_gain (when the env reports it)

Why one sample per turn rather than one per episode with a turn mask: cairn's prompt of
turn t+1 is the instruction, the last K turns and the new observation, not turn t's
context with text appended, so an episode is not one token sequence; one sample per turn
trains each action on the very context it was sampled from. verl's v1 trainer takes a list
of outputs per agent loop (``agent_loop_tq``), so this needs ``trainer.use_v1=true``.

An env that raises (at construction, reset or step) ends the episode as one failed sample:
``cairn_failed`` true, response mask all 0 (nothing trained), advantage 0, counted by the
trainer in ``cairn/failed_episodes``; the training step goes on. So does an episode whose
first prompt does not fit ``rollout.prompt_length`` (``cairn_error`` says so); one whose
later prompt does not fit ends there, failed (as in ``cairn train``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from cairn.data.episode import Episode
from cairn.envs import make
from cairn.integrations.verl.config import cairn_config
from cairn.integrations.verl.episode import EnvFailure, Sample, TurnTokens, play_episode

if TYPE_CHECKING:
    from cairn.envs import TextEnv
    from cairn.rollout import RolloutSettings

__all__ = ["CairnAgentLoop", "episode_outputs", "episode_request_id", "failed_output"]

logger = logging.getLogger(__name__)
_IDLE_ENVS: dict[tuple[str, str], list[TextEnv]] = {}  # envs reused across episodes, per process


@register("cairn")
class CairnAgentLoop(AgentLoopBase):
    """Plays one cairn episode per dataset row; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cairn = cairn_config(self.config)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)

    async def run(  # type: ignore[override]  # one output per turn, not verl's one
        self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any
    ) -> list[AgentLoopOutput]:
        settings = self.cairn.settings(
            self.response_length,
            float(sampling_params.get("temperature", 1.0)),
            float(sampling_params.get("top_p", 1.0)),
            self.prompt_length,
        )
        timing = {"generate_sequences": 0.0}
        sent: list[list[int]] = []  # the prompt ids of every turn, as the server saw them
        determinism = getattr(self.rollout_config, "full_determinism", False)
        request_id = episode_request_id(priority, determinism)
        generate = self._generator(sampling_params, settings, sent, timing, request_id)
        with_lp = bool(sampling_params.get("logprobs"))
        env = None
        try:
            name, options_json, seed = _task(kwargs)
            env = _take_env(name, options_json)
            prompt = self.cairn.prompt(self.tokenizer, env)  # as cairn train builds it
            episode, tokens = await play_episode(
                env, seed, generate, self.tokenizer, prompt, settings,
                env_in_thread=self.cairn.rollout.env_in_thread,
            )  # fmt: skip
        except EnvFailure as err:
            logger.warning("cairn episode failed (%s): %s", kwargs.get("cairn_env"), err)
            _drop_env(env)
            return [failed_output(sent, self.tokenizer, str(err), timing, with_lp)]
        _give_back(name, options_json, env)
        if not episode.steps:  # its first prompt outgrew rollout.prompt_length
            reason = str(episode.events.end or "no step")
            return [failed_output(sent, self.tokenizer, reason, timing, with_lp)]
        for step, ids in zip(episode.steps, sent, strict=True):
            step.prompt_ids = ids  # the (possibly left-truncated) ids the server saw
        return episode_outputs(episode, tokens, self.response_length, timing)

    def _generator(
        self,
        sampling_params: dict,
        settings: RolloutSettings,
        sent: list,
        timing: dict,
        request_id: str,
    ) -> Callable[[list[int]], Awaitable[Sample]]:
        """Token ids in, token ids and log-probs out, through verl's server manager; every
        turn of the episode under one ``request_id`` (``episode_request_id``)."""
        params = {**sampling_params, "max_tokens": settings.max_new_tokens}
        if settings.stop:
            params["stop"] = list(settings.stop)

        async def generate(prompt_ids: list[int]) -> Sample:
            prompt_ids = self._cap_text_prompt_length(prompt_ids)
            sent.append(prompt_ids)
            start = time.perf_counter()
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=prompt_ids, sampling_params=dict(params)
            )
            timing["generate_sequences"] += time.perf_counter() - start
            return Sample(list(out.token_ids), out.log_probs, dict(out.extra_fields or {}))

        return generate


def episode_request_id(priority: int = 0, full_determinism: object = False) -> str:
    """The one request id of an episode's turns, as verl's ``ToolAgentLoop`` makes one per
    trajectory: ``det-<priority>`` under ``rollout.full_determinism``, else a fresh uuid.
    verl's server manager routes a request id to the server that served it before, so the
    episode's growing prompt keeps hitting that server's prefix cache."""
    return f"det-{priority}" if full_determinism else uuid4().hex


def _task(row: dict[str, Any]) -> tuple[str, str, int]:
    """(env name, options JSON, seed) of a dataset row; a malformed row fails its sample."""
    try:
        options_json = str(row.get("cairn_options") or "{}")
        json.loads(options_json)
        return str(row["cairn_env"]), options_json, int(row["cairn_seed"])
    except (KeyError, TypeError, ValueError) as err:
        raise EnvFailure(
            f"row without a valid cairn_env / cairn_options / cairn_seed ({type(err).__name__}:"
            f" {err}); write the data with `cairn verl-data`"
        ) from err


def _key(name: str, options_json: str) -> tuple[str, str]:
    return name, json.dumps(json.loads(options_json), sort_keys=True)


def _take_env(name: str, options_json: str) -> TextEnv:
    idle = _IDLE_ENVS.get(_key(name, options_json))
    if idle:
        return idle.pop()
    try:
        return make(name, **json.loads(options_json))
    except Exception as err:
        raise EnvFailure(f"building env {name!r}: {type(err).__name__}: {err}") from err


def _give_back(name: str, options_json: str, env: TextEnv) -> None:
    _IDLE_ENVS.setdefault(_key(name, options_json), []).append(env)


def _drop_env(env: TextEnv | None) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception:
        logger.warning("closing a failed cairn env raised", exc_info=True)


def episode_outputs(
    episode: Episode, tokens: TurnTokens, response_length: int, timing: dict[str, float]
) -> list[AgentLoopOutput]:
    """One AgentLoopOutput per step of ``episode`` (see the module docstring)."""
    episode_key = uuid4().hex
    outputs = []
    for step, has_lp, extra in zip(episode.steps, tokens.has_logprobs, tokens.extra, strict=True):
        ids = step.action_ids[:response_length]
        fields = {
            **extra,
            "cairn_episode": episode_key,
            "cairn_turn": step.t,
            "cairn_anchor": step.anchor,
            "cairn_step_reward": step.total_reward,
            "cairn_success": episode.success,
            "cairn_valid": step.valid,
            "cairn_failed": False,
            "turn_scores": [],
            "tool_rewards": [],
        }
        fields.update({f"cairn_{k}": v for k, v in step.columns.items()})
        outputs.append(
            AgentLoopOutput(
                prompt_ids=step.prompt_ids,
                response_ids=ids,
                response_mask=[1] * len(ids),
                response_logprobs=step.logprobs[:response_length] if has_lp else None,
                reward_score=episode.ret,
                num_turns=2,
                metrics=AgentLoopMetrics(**timing),
                extra_fields=fields,
            )
        )
    outputs[-1].extra_fields["reward_extra_info"] = {"cairn_success": float(episode.success)}
    return outputs


def failed_output(
    sent: list[list[int]],
    tokenizer: Any,
    error: str,
    timing: dict[str, float],
    with_logprobs: bool = False,
) -> AgentLoopOutput:
    """The one sample of an episode whose env raised: nothing trained, advantage 0."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    fields = {
        "cairn_episode": uuid4().hex,
        "cairn_turn": 0,
        "cairn_anchor": "",
        "cairn_step_reward": 0.0,
        "cairn_success": False,
        "cairn_valid": False,
        "cairn_failed": True,
        "cairn_error": error,
        "turn_scores": [],
        "tool_rewards": [],
        "reward_extra_info": {"cairn_success": 0.0},
    }
    return AgentLoopOutput(
        prompt_ids=sent[-1] if sent else [pad],
        response_ids=[pad],
        response_mask=[0],
        response_logprobs=[0.0] if with_logprobs else None,  # same fields as its group
        reward_score=0.0,
        num_turns=2,
        metrics=AgentLoopMetrics(**timing),
        extra_fields=fields,
    )
