"""LoRA adapters through peft, and the frozen reference a KL penalty needs.

LoRA (Hu et al., arXiv 2106.09685, eq. 3): a frozen weight W0 (d_out, d_in) gets a trainable
low-rank update, ``h = W0 x + (alpha / r) * B A x`` with A (r, d_in), B (d_out, r) and B = 0 at
initialisation, so the adapted model starts equal to the base model. Only A and B train.

With adapters, the reference policy of a KL penalty is the base model itself: the same
module run with the adapters disabled (``AdapterDisabled``), which costs no second copy of
the weights. A full fine-tune keeps a frozen deep copy instead (``reference_model``).

``merged_state_dict`` gives the weights as a plain (un-adapted) model names them, with
``W0 + (alpha / r) B A`` folded in: what an inference engine that knows nothing of adapters
(vLLM without LoRA support switched on) loads after each update.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch

from cairn.policies.casts import forget_casts

if TYPE_CHECKING:
    from cairn.data.tokens import TokenBatch

__all__ = [
    "AdaptedModel",
    "AdapterDisabled",
    "LoraSpec",
    "apply_lora",
    "as_adapted",
    "has_adapters",
    "load_adapters",
    "lora_spec",
    "merged_state_dict",
    "plain_model",
    "reference_logprobs",
    "reference_model",
    "trainable_parameters",
]

_INSTALL = "LoRA needs peft: pip install 'cairn-rl[lora]'"


@dataclass(frozen=True)
class LoraSpec:
    """Rank ``r``, scale numerator ``alpha`` (the update is scaled by alpha / r), the modules
    to adapt (a list of module-name suffixes, or ``"all-linear"``: every linear layer but the
    output head) and dropout on the adapter input."""

    r: int = 8
    alpha: float = 16.0
    target_modules: str | tuple[str, ...] = "all-linear"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.r, int) and self.r > 0):
            raise ValueError(f"lora r must be a positive integer, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"lora alpha must be > 0, got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora dropout must be in [0, 1), got {self.dropout!r}")
        targets = self.target_modules
        if isinstance(targets, str):
            if targets != "all-linear":
                raise ValueError(
                    f"lora target_modules {targets!r}: give 'all-linear' or a list of module "
                    "names such as ['q_proj', 'v_proj']"
                )
        elif not targets or not all(isinstance(t, str) and t for t in targets):
            raise ValueError(f"lora target_modules must be non-empty names, got {targets!r}")


def lora_spec(lora: Any) -> LoraSpec:
    """The ``LoraSpec`` of a config's ``model.lora`` section (or a mapping of its keys)."""
    data = lora.model_dump() if hasattr(lora, "model_dump") else dict(lora)
    targets = data.get("target_modules", "all-linear")
    if not isinstance(targets, str):
        data["target_modules"] = tuple(targets)
    return LoraSpec(**data)


def _peft():
    try:
        import peft
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL) from err
    return peft


@contextmanager
def _quiet_peft() -> Iterator[None]:
    """Silence transformers' deprecation of ``is_gradient_checkpointing``, which peft's
    ``PeftModel`` reads when it wraps a model: a FutureWarning at every run's start that no
    user of cairn can act on (cairn itself asks ``modelio.checkpointing``, new name first)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


class _RankedConfig(Protocol):
    r: int  # a LoRA adapter's rank (peft ``LoraConfig.r``)


class AdaptedModel(Protocol):
    """What cairn uses of a peft model carrying adapters (``has_adapters``): peft types
    these on ``PeftModel`` and its tuner, which ``PeftModel`` forwards to by attribute."""

    peft_config: Mapping[str, _RankedConfig]
    training: bool

    @property
    def config(self) -> Any: ...  # the base model's config (PretrainedConfig or a subclass)

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def eval(self) -> object: ...

    def train(self, mode: bool = True) -> object: ...

    def disable_adapter(self) -> AbstractContextManager[object]: ...

    def merge_adapter(self) -> None: ...

    def unmerge_adapter(self) -> None: ...

    def get_base_model(self) -> torch.nn.Module: ...

    def merge_and_unload(self) -> torch.nn.Module: ...

    def unload(self) -> torch.nn.Module: ...


def has_adapters(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model carrying adapters."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def as_adapted(model: torch.nn.Module) -> AdaptedModel:
    """``model`` seen as the peft model it is (``AdaptedModel``); a one-line ValueError
    when it carries no adapters (``has_adapters``)."""
    if not has_adapters(model):
        raise ValueError(f"{type(model).__name__} has no adapters")
    return cast(AdaptedModel, model)  # peft's PeftModel, found by its attributes just above


def apply_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """Wrap ``model`` (an ``AutoModelForCausalLM``) with fresh LoRA adapters; base frozen.

    Adapter weights are created on the base model's device, in float32 when the base is
    bfloat16 or float16 (peft's ``autocast_adapter_dtype``), so the optimizer's updates of
    them are not rounded away; the base's matrix products stay in its dtype. Raises
    ValueError when no module of the model matches ``spec.target_modules``.
    """
    peft = _peft()
    targets = spec.target_modules
    config = peft.LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )
    try:
        with _quiet_peft():
            return peft.get_peft_model(model, config, autocast_adapter_dtype=True)
    except ValueError as err:
        raise ValueError(f"lora target_modules {targets!r} match no module: {err}") from err


def load_adapters(model: torch.nn.Module, folder: Path) -> torch.nn.Module:
    """``model`` (the base) with the trainable adapters saved in ``folder`` (a checkpoint)."""
    with _quiet_peft():
        return _peft().PeftModel.from_pretrained(model, folder, is_trainable=True)


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Name -> parameter for every parameter that receives gradients."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


class AdapterDisabled(torch.nn.Module):
    """The base policy of an adapted model: ``forward`` runs it with adapters switched off.

    The adapted model is held outside the module tree, so this reference has no parameters
    or state of its own (``state_dict()`` is empty) and never drifts from the base weights.
    """

    _adapted: AdaptedModel  # set with object.__setattr__: not registered as a submodule

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        if not has_adapters(model):
            raise ValueError(f"{type(model).__name__} has no adapters to disable")
        object.__setattr__(self, "_adapted", as_adapted(model))

    @property
    def config(self) -> Any:
        return self._adapted.config

    @property
    def adapted(self) -> AdaptedModel:
        """The adapted model this reference switches the adapters of."""
        return self._adapted

    @contextmanager
    def switched_off(self) -> Iterator[AdaptedModel]:
        """The adapted model in eval mode with its adapters off and no gradients: inside,
        it computes the base policy (its mode is restored on exit)."""
        model = self._adapted
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), model.disable_adapter():
                yield model
        finally:
            model.train(was_training)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.switched_off() as model:
            return model(*args, **kwargs)


@torch.no_grad()
def reference_logprobs(
    policy: Any, ref_model: torch.nn.Module, tokens: TokenBatch, temperature: float
) -> list[list[float]]:
    """Per-row action log-probs under ``ref_model`` (the KL reference), scored like
    ``policy`` scores, in chunks of about 1024 rows: one list per token-batch row.

    An ``AdapterDisabled`` reference is scored as the adapted model with its adapters
    switched off, so scoring keeps its fast path (shared prompt prefixes, the output head on
    response positions only); through the wrapper, whose forward is all it shows, scoring
    would run the whole model and its output head over every row's full context.
    """
    if isinstance(ref_model, AdapterDisabled):
        scope: AbstractContextManager[object] = ref_model.switched_off()
        ref = policy.with_model(ref_model.adapted)
    else:
        scope, ref = nullcontext(), policy.with_model(ref_model)
    out: list[list[float]] = []
    with scope:
        for idx in np.array_split(np.arange(len(tokens)), max(1, len(tokens) // 1024)):
            logp, _ = ref.score(tokens.minibatch(idx).inputs, temperature, with_entropy=False)
            for row, i in enumerate(idx):
                k = len(tokens.action_ids[i])
                out.append(logp[row, logp.shape[1] - k :].tolist() if k else [])
    return out


def reference_model(model: torch.nn.Module) -> torch.nn.Module:
    """The frozen reference policy of a KL penalty: the base with adapters disabled when
    ``model`` has adapters (no copy), else a frozen deep copy in eval mode."""
    if has_adapters(model):
        return AdapterDisabled(model)
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


@contextmanager
def _merged(model: AdaptedModel) -> Iterator[torch.nn.Module]:
    model.merge_adapter()
    try:
        yield model.get_base_model()
    finally:
        model.unmerge_adapter()
        forget_casts(model.get_base_model())  # peft wrote through .data: the copies are stale


def _plain_name(name: str, prefixes: Sequence[str] = ("base_model.model.",)) -> str:
    for p in prefixes:
        name = name.removeprefix(p)
    return name.replace(".base_layer.", ".")


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Weights under the plain model's names, adapters folded in (W0 + alpha/r * B A).

    A model without adapters gives its own ``state_dict()``. Tensors are detached copies.
    """
    if not has_adapters(model):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    with _merged(as_adapted(model)) as base:
        return {
            _plain_name(k): v.detach().clone()
            for k, v in base.state_dict().items()
            if "lora_" not in k
        }


def plain_model(model: torch.nn.Module, merge: bool = True) -> torch.nn.Module:
    """A copy of ``model`` without peft wrappers: adapters folded in (``merge``) or dropped
    (the base alone). A model without adapters is copied as it is."""
    clone = copy.deepcopy(model)
    if not has_adapters(clone):
        return clone
    adapted = as_adapted(clone)
    return adapted.merge_and_unload() if merge else adapted.unload()
