"""``LossConfig``: the policy-loss hyper-parameters, validated when built.

Defaults are the PPO/GRPO baseline: symmetric clip 0.2, no dual clip, no KL, no entropy
bonus, token-mean aggregation. Presets: DAPO clip_high 0.28; ELPO clip_low = clip_high =
0.315 on the tokens flagged ``after_error``; EMPO2 off-policy mode clip 0.2 / 0.3 with
dual_clip 10; LUFFY entropy_coef 0.001, shaping gamma 0.1.

Per-token flags (``Step.flags``, copied by the token batch without reading their names)
reach the loss as one mapping; ``LossConfig.flag_effects`` says what each flag does. A
method that needs a new effect on its tokens sets a flag on its steps and adds a line
there; the loss and the trainer stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cairn.losses._names import AGG_MODES, KL_KINDS, check_finite_number

__all__ = ["FlagEffect", "LossConfig"]


def _key(default: Any, help: str, **schema: Any) -> Any:
    """A field with its config help string and config constraints (pydantic ``Field``
    keywords, ``type`` to narrow the annotation): ``cairn.train.schema`` builds the
    ``loss`` section from these, so each key is written once, here."""
    return field(default=default, metadata={"help": help, **schema})


@dataclass(frozen=True)
class FlagEffect:
    """What a per-token flag does to the tokens it marks (None: that part is off).

    clip_low             eps_low of the clipped surrogate on flagged tokens (replaces clip_low)
    shaping_gamma        policy shaping -A * p / (p + gamma) instead of the clipped surrogate
    turn_mask_threshold  drop a flagged turn whole when its min old logprob is below this
    """

    clip_low: float | None = None
    shaping_gamma: float | None = None
    turn_mask_threshold: float | None = None


@dataclass(frozen=True)
class LossConfig:
    """Policy-loss settings. A bad value raises ValueError naming the field and what is allowed.

    clip_low                 eps_low, ratio floor 1 - eps_low; in [0, 1)
    clip_high                eps_high, ratio ceiling 1 + eps_high; >= 0
    dual_clip                c > 1 caps the loss of negative-advantage tokens at -c*A; None off
    kl_coef                  weight of the KL-to-reference penalty; >= 0 (needs ref_logp if > 0)
    kl_kind                  KL estimator, one of KL_KINDS
    entropy_coef             weight of the entropy bonus (subtracted); >= 0 (needs entropy)
    agg                      aggregation mode, one of AGG_MODES
    norm_len                 constant length of seq-mean-token-sum-norm; None -> T; > 0
    offpolicy_shaping_gamma  LUFFY shaping f(p) = p / (p + gamma); > 0
    turn_mask_threshold      EMPO2: drop a tips-stripped turn whose min old logprob is below
                             this; <= 0, or None to disable
    crit_clip_low            ELPO: eps_low on the tokens flagged ``after_error`` (at or after
                             the first irrecoverable step); in [0, 1). The name is the
                             published config key ``loss.crit_clip_low``.
    """

    clip_low: float = _key(0.2, "PPO lower clip eps_low.", ge=0, lt=1)
    clip_high: float = _key(0.2, "PPO upper clip eps_high (DAPO: 0.28).", ge=0)
    dual_clip: float | None = _key(None, "Dual-clip c for A < 0 (3..10).", gt=1)
    kl_coef: float = _key(0.0, "KL-to-reference coefficient (0: no ref).", ge=0)
    kl_kind: str = _key("k3", "KL estimator.", type=Literal["k1", "k2", "k3", "low_var_kl", "abs"])
    entropy_coef: float = _key(0.0, "Entropy bonus coefficient.", ge=0)
    agg: str = _key(
        "token-mean",
        "Loss aggregation mode.",
        type=Literal[
            "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
        ],
    )
    norm_len: float | None = _key(
        None, "Constant length for seq-mean-token-sum-norm.", gt=0, type=int | None
    )
    offpolicy_shaping_gamma: float = _key(
        0.1, "LUFFY: f(p) = p / (p + gamma) on demonstration tokens.", gt=0
    )
    turn_mask_threshold: float | None = _key(
        -5.0, "EMPO2: drop a tips-stripped turn whose min old logprob is below.", le=0
    )
    crit_clip_low: float = _key(
        0.315,
        "ELPO: eps_low for steps at/after the first irrecoverable step (crit).",
        ge=0,
        lt=1,
    )

    def __post_init__(self) -> None:
        _check_range("clip_low", self.clip_low, 0.0, 1.0, "in [0, 1)", high_open=True)
        _check_range("clip_high", self.clip_high, 0.0, None, ">= 0")
        if self.dual_clip is not None:
            c = check_finite_number(self.dual_clip, "dual_clip")
            if c <= 1.0:
                raise ValueError(f"dual_clip must be > 1 (typically 3..10) or None, got {c!r}")
        _check_range("kl_coef", self.kl_coef, 0.0, None, ">= 0")
        _check_range("entropy_coef", self.entropy_coef, 0.0, None, ">= 0")
        if self.kl_kind not in KL_KINDS:
            raise ValueError(f"kl_kind {self.kl_kind!r} is unknown; allowed: {', '.join(KL_KINDS)}")
        if self.agg not in AGG_MODES:
            raise ValueError(f"agg {self.agg!r} is unknown; allowed: {', '.join(AGG_MODES)}")
        if self.norm_len is not None and check_finite_number(self.norm_len, "norm_len") <= 0:
            raise ValueError(f"norm_len must be > 0 or None (meaning T), got {self.norm_len!r}")
        gamma = check_finite_number(self.offpolicy_shaping_gamma, "offpolicy_shaping_gamma")
        if gamma <= 0:
            raise ValueError(f"offpolicy_shaping_gamma must be > 0, got {gamma!r}")
        if self.turn_mask_threshold is not None:
            _check_range("turn_mask_threshold", self.turn_mask_threshold, None, 0.0, "<= 0")
        _check_range("crit_clip_low", self.crit_clip_low, 0.0, 1.0, "in [0, 1)", high_open=True)

    def flag_effects(self) -> dict[str, FlagEffect]:
        """Flag name -> its effect on the flagged tokens, with this config's numbers."""
        return {
            # ELPO (arXiv 2602.09598): a wider eps_low from the first irrecoverable step on
            "after_error": FlagEffect(clip_low=self.crit_clip_low),
            # LUFFY (arXiv 2504.14945, Sec. 3): demonstration tokens are policy-shaped
            "off_policy": FlagEffect(shaping_gamma=self.offpolicy_shaping_gamma),
            # EMPO2 (arXiv 2602.23008): turns trained without their tips may be dropped
            "tips_stripped": FlagEffect(turn_mask_threshold=self.turn_mask_threshold),
        }


def _check_range(
    name: str,
    value: object,
    low: float | None,
    high: float | None,
    allowed: str,
    high_open: bool = False,
) -> None:
    v = check_finite_number(value, name)
    too_low = low is not None and v < low
    too_high = high is not None and (v >= high if high_open else v > high)
    if too_low or too_high:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
