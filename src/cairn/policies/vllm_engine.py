"""vLLM generation behind the policy's ``generate``: batched, prefix-cached, weights synced.

The trained model stays a transformers ``AutoModelForCausalLM`` (``HFPolicy``: scoring,
loss, checkpoints); a vLLM ``LLM`` holds a second copy of the weights and samples the
free-text actions of every turn in one batched call (``enable_prefix_caching``: the shared
instruction and history of multi-turn prompts and of group members are prefilled once).
Rows restricted to admissible actions (``choices``) are sampled by the HF backend, whose
restricted distribution the trainer scores exactly (``cairn.policies.hf``).

After every update the new weights go to vLLM (``VLLMEngine.sync``): LoRA adapters as a
new ``LoRARequest`` (``sync="adapter"``), or full weights, adapters merged in, through a
worker extension that calls the model's ``load_weights`` (``sync="merged"``); the prefix
cache is reset so that no KV block computed with old weights is reused.

Two samplers of "the same" weights disagree (kernels, bf16, batch shapes). With
``behaviour_logprobs="trainer"`` (the default, as in verl) the trainer re-scores every
vLLM-sampled action teacher-forced, the PPO ratio is taken against those log-probs, and
the disagreement is logged (``logprob_mismatch``). ``tis_cap`` adds the truncated
importance correction of the rollout/trainer mismatch (Yao et al. 2025, "Your efficient
RL framework secretly brings you off-policy RL training"; truncated IS as in IMPALA,
arXiv 1802.01561, eq. 1): each token's loss is weighted by
``w = min(exp(logp_trainer - logp_vllm), C)``, which here scales that token's advantage
(w > 0 commutes with the clipped surrogate's min/max and with the dual clip).

Nothing here imports vLLM until an engine is built, so options validate and the pure
functions test on any machine. vLLM's API is used as documented for vLLM >= 0.10
(V1 engine): ``LLM.generate`` with token-id prompts and per-request ``SamplingParams``,
``LLM.collective_rpc``, ``LLM.reset_prefix_cache``, ``LoRARequest``.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cairn.data.episode import Episode, Step
from cairn.data.tokens import Minibatch, collate_scoring, right_align
from cairn.policies.hf import Generation, HFPolicy
from cairn.policies.lora import as_adapted, has_adapters, merged_state_dict, plain_model
from cairn.policies.modelio import save_pretrained

__all__ = [
    "VLLMEngine",
    "VLLMOptions",
    "VLLMPolicy",
    "WeightSyncExtension",
    "logprob_mismatch",
    "tis_weights",
    "to_generation",
]

_INSTALL = "the vllm engine needs vLLM and an NVIDIA GPU: pip install 'cairn-rl[vllm]'"


@dataclass(frozen=True)
class VLLMOptions:
    """``rollout.engine_options`` of the vllm engine.

    gpu_memory_utilization: share of GPU memory vLLM may take (weights + KV cache); the
    trainer's model, optimizer and activations live in the rest.
    sync: how new weights reach vLLM: ``adapter`` (LoRA only: a new LoRARequest),
    ``merged`` (full weights, adapters folded in) or ``auto`` (adapter with LoRA, else merged).
    behaviour_logprobs: ``trainer`` re-scores sampled actions with the trained model (old
    log-probs of the PPO ratio); ``engine`` keeps vLLM's own log-probs.
    tis_cap: C of the truncated importance weight min(exp(lp_trainer - lp_vllm), C); null: off.
    in_process: run vLLM's engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
    so weight updates pass GPU tensors without copies.
    llm_kwargs: further keyword arguments of ``vllm.LLM``.
    """

    gpu_memory_utilization: float = 0.35
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    sync: str = "auto"
    behaviour_logprobs: str = "trainer"
    tis_cap: float | None = None
    in_process: bool = True
    seed: int = 0
    llm_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if self.sync not in ("auto", "adapter", "merged"):
            raise ValueError(f"sync {self.sync!r}: allowed auto, adapter, merged")
        if self.behaviour_logprobs not in ("trainer", "engine"):
            raise ValueError(
                f"behaviour_logprobs {self.behaviour_logprobs!r}: allowed trainer, engine"
            )
        if self.tis_cap is not None:
            if not self.tis_cap >= 1:
                raise ValueError(f"tis_cap must be >= 1 (or null), got {self.tis_cap!r}")
            if self.behaviour_logprobs != "trainer":
                raise ValueError("tis_cap needs behaviour_logprobs='trainer' (it corrects them)")
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise ValueError(f"max_model_len must be > 0, got {self.max_model_len!r}")

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> VLLMOptions:
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(
                f"rollout engine 'vllm' has no option {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(allowed)}"
            )
        return cls(**options)


# -- pure functions (no vLLM needed) ------------------------------------------------------
def _flat(rows: Sequence[Sequence[float]]) -> np.ndarray:
    return np.fromiter((x for r in rows for x in r), dtype=np.float64)


def logprob_mismatch(
    engine_lp: Sequence[Sequence[float]], trainer_lp: Sequence[Sequence[float]]
) -> dict[str, float]:
    """Agreement of the sampler's and the trainer's log-probs of the same sampled tokens.

    Rows are actions (ragged, one value per token). With d = lp_trainer - lp_engine per token:
    ``abs_diff_mean`` / ``abs_diff_max`` of |d|, ``prob_abs_diff_mean`` of |p_trainer - p_engine|,
    ``kl_k3``: mean(exp(d) - 1 - d), an unbiased, non-negative estimate of KL(engine || trainer)
    from tokens sampled by the engine (Schulman's k3). Empty input gives zeros.
    """
    if len(engine_lp) != len(trainer_lp):
        raise ValueError(f"{len(engine_lp)} engine rows vs {len(trainer_lp)} trainer rows")
    for i, (a, b) in enumerate(zip(engine_lp, trainer_lp, strict=True)):
        if len(a) != len(b):
            raise ValueError(f"row {i}: {len(a)} engine log-probs vs {len(b)} trainer log-probs")
    e, t = _flat(engine_lp), _flat(trainer_lp)
    if e.size == 0:
        return {"abs_diff_mean": 0.0, "abs_diff_max": 0.0, "prob_abs_diff_mean": 0.0, "kl_k3": 0.0}
    d = t - e
    return {
        "abs_diff_mean": float(np.abs(d).mean()),
        "abs_diff_max": float(np.abs(d).max()),
        "prob_abs_diff_mean": float(np.abs(np.exp(t) - np.exp(e)).mean()),
        "kl_k3": float((np.expm1(d) - d).mean()),
    }


def tis_weights(
    trainer_lp: Sequence[Sequence[float]], engine_lp: Sequence[Sequence[float]], cap: float
) -> list[list[float]]:
    """Per-token truncated importance weights min(exp(lp_trainer - lp_engine), cap)."""
    if not cap >= 1:
        raise ValueError(f"cap must be >= 1, got {cap!r}")
    out = []
    for t, e in zip(trainer_lp, engine_lp, strict=True):
        d = np.asarray(t, dtype=np.float64) - np.asarray(e, dtype=np.float64)
        out.append(np.minimum(np.exp(np.minimum(d, math.log(cap))), cap).tolist())
    return out


def to_generation(completion: Any, policy: HFPolicy, stop: Sequence[str]) -> Generation:
    """A vLLM ``CompletionOutput`` as a cairn ``Generation``.

    ``completion.logprobs[i]`` maps token id -> object with ``.logprob`` (vLLM's Logprob);
    ``finish_reason`` is ``length`` or ``stop``, with ``stop_reason`` None for end-of-sequence
    and the matched string for a stop string. The text is decoded by the policy's tokenizer
    and cut at the first stop string, exactly as the HF backend does.
    """
    ids = [int(t) for t in completion.token_ids]
    if completion.logprobs is None or len(completion.logprobs) != len(ids):
        raise ValueError("vLLM returned no log-prob per token: SamplingParams(logprobs=0) needed")
    lps = [float(pos[tok].logprob) for pos, tok in zip(completion.logprobs, ids, strict=True)]
    if completion.finish_reason == "length":
        finish = "length"
    elif isinstance(completion.stop_reason, str):
        finish = "stop"
    else:
        finish = "eos"
    return Generation(
        token_ids=ids, logprobs=lps, text=policy._text(ids, stop), finish=finish, entropies=None
    )


# -- vLLM side ----------------------------------------------------------------------------------
class WeightSyncExtension:
    """Mixed into vLLM's GPU worker (``LLM(worker_extension_cls=...)``): called through
    ``LLM.collective_rpc("cairn_load_weights", args=(weights,))``."""

    def cairn_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        self.model_runner.model.load_weights(weights=weights)  # type: ignore[attr-defined]
        return len(weights)


def build_llm(model_dir: Path, options: VLLMOptions, lora_rank: int | None, dtype: str) -> Any:
    """A ``vllm.LLM`` over the model saved in ``model_dir`` (replaced by fakes in tests)."""
    if options.in_process:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        from vllm import LLM
    except ImportError as err:
        raise ImportError(_INSTALL) from err
    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "tokenizer": str(model_dir),
        "dtype": dtype,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "enable_prefix_caching": options.enable_prefix_caching,
        "enforce_eager": options.enforce_eager,
        "seed": options.seed,
        "worker_extension_cls": f"{__name__}.WeightSyncExtension",
    }
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    if lora_rank is not None:
        kwargs.update(enable_lora=True, max_lora_rank=lora_rank, max_loras=1)
    kwargs.update(options.llm_kwargs or {})
    kwargs["trust_remote_code"] = False  # never a model folder's own code, whatever is given
    return LLM(**kwargs)


def _sampling_params(**kwargs: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(**kwargs)


def _lora_request(name: str, version: int, path: Path) -> Any:
    from vllm.lora.request import LoRARequest

    return LoRARequest(name, version, str(path))


class VLLMPolicy(HFPolicy):
    """``HFPolicy`` whose free-text sampling runs on vLLM; scoring stays with the HF model."""

    def __init__(self, base: HFPolicy, llm: Any):
        super().__init__(base.model, base.tokenizer, base.device, base.options)
        self.llm = llm
        self.lora_request: Any = None
        self.generated_tokens = 0  # tokens sampled by vLLM (for tokens/s)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 32,
        stop: Sequence[str] = (),
        choices: Sequence[Sequence[str] | None] | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """As ``HFPolicy.generate``; rows with ``choices`` go to the HF backend."""
        n = len(prompts)
        restricted = [i for i in range(n) if choices is not None and choices[i]]
        free = [i for i in range(n) if i not in set(restricted)]
        out: list[Generation | None] = [None] * n
        if restricted:
            gens = super().generate(
                [prompts[i] for i in restricted],
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                stop=stop,
                choices=[choices[i] for i in restricted],  # type: ignore[index]
                greedy=greedy,
                generator=generator,
            )
            for i, g in zip(restricted, gens, strict=True):
                out[i] = g
        if free:
            seeds = torch.randint(0, 2**31 - 1, (len(free),), generator=generator).tolist()
            params = [
                _sampling_params(
                    n=1,
                    temperature=0.0 if greedy else temperature,
                    top_p=1.0 if greedy else top_p,
                    max_tokens=max_new_tokens,
                    stop=list(stop) or None,
                    logprobs=0,
                    seed=int(s),
                )
                for s in seeds
            ]
            inputs = [{"prompt_token_ids": list(prompts[i])} for i in free]
            results = self.llm.generate(
                inputs, params, use_tqdm=False, lora_request=self.lora_request
            )
            for i, res in zip(free, results, strict=True):
                out[i] = to_generation(res.outputs[0], self, stop)
                self.generated_tokens += len(out[i].token_ids)  # type: ignore[union-attr]
        return out  # type: ignore[return-value]


class VLLMEngine:
    """The vllm rollout engine: its policy, the three trainer hooks and weight sync."""

    def __init__(
        self, policy: HFPolicy, options: VLLMOptions, workdir: Path, temperature: float = 1.0
    ):
        self.options, self.dir, self.temperature = options, Path(workdir), temperature
        model = policy.model
        lora = has_adapters(model)
        if options.sync == "adapter" and not lora:
            raise ValueError("engine_options.sync='adapter' needs model.lora (no adapters here)")
        self.sync_mode = (
            ("adapter" if lora else "merged") if options.sync == "auto" else options.sync
        )
        model_dir = self.dir / "vllm_model"
        self._save_plain(policy, model_dir, merge=self.sync_mode == "merged")
        rank = as_adapted(model).peft_config["default"].r if self.sync_mode == "adapter" else None
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.policy = VLLMPolicy(policy, build_llm(model_dir, options, rank, dtype))
        self.version = 0
        self._weights: list[list[float]] | None = None
        if self.sync_mode == "adapter":
            self.sync()  # a resumed run's adapters are not in the saved base

    @staticmethod
    def _save_plain(policy: HFPolicy, folder: Path, merge: bool) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        save_pretrained(plain_model(policy.model, merge=merge), folder, safe_serialization=True)
        policy.tokenizer.save_pretrained(folder)

    # -- hooks -------------------------------------------------------------------------------
    def after_rollout(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Re-score vLLM-sampled actions with the trainer; log the mismatch; TIS weights."""
        steps = [s for e in episodes for s in e.steps]
        free = [s for s in steps if s.allowed is None and s.action_ids]
        engine_lp = [list(s.logprobs) for s in free]
        trainer_lp = self._trainer_logprobs(free)
        stats = logprob_mismatch(engine_lp, trainer_lp)
        if self.options.behaviour_logprobs == "trainer":
            for s, lp in zip(free, trainer_lp, strict=True):
                s.logprobs = lp
        self._weights = None
        if self.options.tis_cap is not None:
            w = dict(
                zip(
                    map(id, free),
                    tis_weights(trainer_lp, engine_lp, self.options.tis_cap),
                    strict=True,
                )
            )
            self._weights = [w.get(id(s), [1.0] * len(s.action_ids)) for s in steps]
        out = {f"rollout/logprob_{k}": v for k, v in stats.items()}
        out["rollout/engine_tokens"] = float(sum(len(s.action_ids) for s in free))
        return out

    def reweight(self, mb: Minibatch, idx: np.ndarray) -> Minibatch:
        """Scale each token's advantage by its truncated importance weight (``tis_cap``)."""
        if self._weights is None:
            return mb
        w = right_align([self._weights[i] for i in idx], mb.advantages.shape[1], fill=1.0)
        mb.advantages = mb.advantages * w.to(mb.advantages.device)
        return mb

    def sync(self) -> None:
        """Send the trained weights to vLLM (a new adapter version, or full weights)."""
        self.version += 1
        llm, model = self.policy.llm, self.policy.model
        if self.sync_mode == "adapter":
            folder = self.dir / "vllm_adapters" / f"v{self.version:06d}"
            save_pretrained(model, folder)
            self.policy.lora_request = _lora_request(f"cairn-v{self.version}", self.version, folder)
            shutil.rmtree(
                self.dir / "vllm_adapters" / f"v{self.version - 2:06d}", ignore_errors=True
            )
        else:
            weights = merged_state_dict(model) if has_adapters(model) else model.state_dict()
            device = None if self.options.in_process else "cpu"
            named = [
                (k, v.detach().to(device) if device else v.detach()) for k, v in weights.items()
            ]
            llm.collective_rpc("cairn_load_weights", args=(named,))
        llm.reset_prefix_cache()

    def close(self) -> None:
        self.policy.llm = None

    # -- helpers -------------------------------------------------------------------------
    @torch.no_grad()
    def _trainer_logprobs(self, steps: Sequence[Step], chunk: int = 256) -> list[list[float]]:
        policy, out = self.policy, []
        for lo in range(0, len(steps), chunk):
            part = steps[lo : lo + chunk]
            inputs = collate_scoring(
                [s.prompt_ids for s in part], [s.action_ids for s in part], pad_id=policy.pad_id
            )
            logp, _ = policy.score(inputs, self.temperature, with_entropy=False)
            for row, s in enumerate(part):
                out.append(logp[row, logp.shape[1] - len(s.action_ids) :].tolist())
        return out
