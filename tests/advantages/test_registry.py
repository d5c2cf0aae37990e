"""The registry: names, options, checks, terms, registration rules."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from adv_batches import random_batch

from cairn.advantages import (
    _registry,
    available,
    estimate,
    estimate_terms,
    options_of,
    register,
    register_terms,
    terms_of,
    validate_options,
)
from cairn.advantages.gigpo import gigpo
from cairn.data import StepBatch

PACKAGE = Path(_registry.__file__).parent


def _registered_in_source() -> set[str]:
    """The names the package's own modules register (``@register("name"`` or
    ``@register_terms("name"``, read from the source), with no list kept by hand."""
    pattern = re.compile(r'@register(?:_terms)?\(\s*"(\w+)"')
    return {m for f in PACKAGE.glob("[!_]*.py") for m in pattern.findall(f.read_text())}


@pytest.fixture
def batch() -> StepBatch:
    return random_batch(np.random.default_rng(0))


def test_available_lists_every_estimator() -> None:
    built_in = _registered_in_source()
    assert len(built_in) >= 11  # arpo ... vineppo: the scan finds the decorators
    assert built_in <= set(available())
    assert set(available()) == set(_registry._REGISTRY)
    assert available() == sorted(available())


def test_options_of_gives_the_documented_defaults() -> None:
    assert options_of("gigpo") == {
        "gamma": 0.95,
        "step_weight": 1.0,
        "norm": "mean",
        "episode_norm": None,  # None: the value of norm (the reference's one mode)
        "episode_stats": "episodes",
        "similarity": None,
    }
    assert options_of("grpo") == {"norm": "mean_std"}
    assert options_of("rloo") == {}
    assert options_of("proxmo")["tau"] == 0.1 and options_of("proxmo")["alpha"] == 4.0


def test_options_of_returns_a_copy() -> None:
    options_of("gigpo")["gamma"] = 0.1
    assert options_of("gigpo")["gamma"] == 0.95


def test_unknown_name_lists_available(batch: StepBatch) -> None:
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'gipgo'.*gigpo.*grpo"):
        estimate("gipgo", batch)
    with pytest.raises(ValueError, match="available"):
        validate_options("nope", {})


def test_unknown_option_lists_allowed_options_with_defaults(batch: StepBatch) -> None:
    with pytest.raises(ValueError, match=r"no option 'lam'.*gamma=0\.95.*norm='mean'"):
        estimate("gigpo", batch, lam=0.9)
    with pytest.raises(ValueError, match=r"no option 'norm'; allowed \(with defaults\): \(none\)"):
        estimate("rloo", batch, norm="mean")


BAD_VALUES = [
    ("gigpo", "norm", "std"),
    ("gigpo", "norm", None),
    ("gigpo", "episode_norm", "mean_norm"),
    ("gigpo", "episode_stats", "steps"),
    ("gigpo", "gamma", 1.5),
    ("gigpo", "gamma", -0.1),
    ("gigpo", "gamma", True),
    ("gigpo", "gamma", "0.9"),
    ("gigpo", "step_weight", math.nan),
    ("gigpo", "step_weight", math.inf),
    ("gigpo", "similarity", 0.0),
    ("gigpo", "similarity", 1.2),
    ("grpo", "norm", "MEAN"),
    ("proxmo", "tau", 0.0),
    ("proxmo", "alpha", -1.0),
    ("proxmo", "beta", -0.5),
    ("proxmo", "features", [1.0, 2.0]),
    ("proxmo", "features", [[1.0, math.nan]]),
    ("proxmo", "features", "tfidf"),
    ("vineppo", "whiten", 1),
    ("treepo", "whiten", "yes"),
    ("arpo", "attribution", "medium"),
    ("gae", "lam", 1.01),
    ("igpo", "gamma", None),
    ("elpo", "branch_weight", "half"),
]


@pytest.mark.parametrize(("name", "key", "value"), BAD_VALUES)
def test_bad_values_are_rejected_with_what_is_allowed(
    name: str, key: str, value: object, batch: StepBatch
) -> None:
    with pytest.raises(ValueError, match=rf"option {key}=.* is not allowed; allowed: "):
        validate_options(name, {key: value})
    with pytest.raises(ValueError, match=f"option {key}="):
        estimate(name, batch, **{key: value})


def test_validate_options_accepts_good_values_without_a_batch() -> None:
    validate_options("gigpo", {"gamma": 1, "norm": "mean_std", "similarity": 0.95})
    validate_options("proxmo", {"features": np.ones((3, 2)), "tau": 1e-9})
    validate_options("vineppo", {"whiten": np.bool_(False)})
    # The ends of the documented ranges are inside them.
    validate_options("gigpo", {"gamma": 0.0, "similarity": 1.0})
    validate_options("gae", {"gamma": 1.0, "lam": 0.0})


DOCS = Path(__file__).resolve().parents[2] / "docs" / "algorithms"


def _documented_options() -> dict[str, dict[str, object]]:
    """Each estimator's options and defaults as its page in docs/algorithms states them.

    The page of an estimator is the one the index (README.md) lists in its row; its options
    are the rows of "| Option | Default |" tables (a bare `key` or `advantage.options.key`)
    and of "| Key | Default |" tables (`advantage.options.key` only). No table: no options.
    """
    pages = {}
    for row in (DOCS / "README.md").read_text().splitlines():
        found = re.match(r"\| [^|]+ \| \[[^]]+\]\(([\w.]+\.md)\) \| `(\w+)`", row)
        if found:
            pages.setdefault(found[2], DOCS / found[1])  # its first row: DAPO reuses grpo
    out = {}
    for name, page in pages.items():
        out[name], kind = {}, None
        for row in page.read_text().splitlines():
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            if len(cells) >= 2 and cells[1] == "Default":
                kind = cells[0]
            elif not row.startswith("|"):
                kind = None
            elif kind and cells[0].startswith("`") and cells[1] != "---":
                key = cells[0].strip("`")
                if kind == "Key" and not key.startswith("advantage.options."):
                    continue
                value = cells[1].strip("`")
                out[name][key.removeprefix("advantage.options.")] = (
                    None if value in ("None", "null") else yaml.safe_load(value)
                )
    return out


def test_every_estimator_has_the_options_and_defaults_its_page_states() -> None:
    """An oracle written independently of the registry (which reads the signatures): the
    doc pages. Fails when an option is added, renamed or re-defaulted without its page."""
    documented = _documented_options()
    assert set(documented) == set(available())  # the index lists every estimator
    assert documented["gigpo"]["gamma"] == 0.95 and documented["gae"] == {"gamma": 1.0, "lam": 0.95}
    for name in available():
        assert options_of(name) == documented[name], name


def test_direct_calls_check_options_too(batch: StepBatch) -> None:
    with pytest.raises(ValueError, match="option norm='bad'"):
        gigpo(batch, norm="bad")


def test_terms_are_declared_and_returned(batch: StepBatch) -> None:
    assert terms_of("gigpo") == ("A_E", "A_S", "G")
    assert terms_of("proxmo") == ("A_E", "A_S", "w", "G")
    assert terms_of("grpo") == ()
    adv, terms = estimate_terms("gigpo", batch, step_weight=0.5)
    np.testing.assert_allclose(adv, terms["A_E"] + 0.5 * terms["A_S"])
    adv, terms = estimate_terms("grpo", batch)
    assert terms == {} and adv.shape == (len(batch),)
    with pytest.raises(ValueError, match="no option"):
        estimate_terms("gigpo", batch, omega=1.0)


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))


def test_a_new_estimator_registers_and_runs(scratch_registry: None, batch: StepBatch) -> None:
    @register("scaled_reward", checks={"scale": _registry.real(0.0)})
    def scaled_reward(b: StepBatch, *, scale: float = 2.0) -> np.ndarray:
        return scale * b.reward

    assert "scaled_reward" in available()
    np.testing.assert_allclose(estimate("scaled_reward", batch), 2.0 * batch.reward)
    with pytest.raises(ValueError, match="scale=-1"):
        estimate("scaled_reward", batch, scale=-1)


def test_register_parts_derives_the_plain_estimator(
    scratch_registry: None, batch: StepBatch
) -> None:
    @register_terms("half_reward", checks={"scale": _registry.real(0.0)}, term_names=("r",))
    def half_reward(b: StepBatch, *, scale: float = 0.5) -> tuple:
        return scale * b.reward, {"r": b.reward}

    # the plain estimator is the terms function's first item, with the same options
    np.testing.assert_allclose(half_reward(batch), 0.5 * batch.reward)
    np.testing.assert_allclose(estimate("half_reward", batch, scale=2.0), 2.0 * batch.reward)
    adv, terms = estimate_terms("half_reward", batch, scale=2.0)
    np.testing.assert_allclose(adv, 2.0 * batch.reward)
    assert list(terms) == ["r"] and options_of("half_reward") == {"scale": 0.5}
    with pytest.raises(ValueError, match="scale=-1"):
        half_reward(batch, scale=-1)
    with pytest.raises(TypeError, match="term_names"):
        register_terms("no_parts", checks={}, term_names=())


def test_registration_rules(scratch_registry: None) -> None:
    def ok(b: StepBatch, *, x: float = 1.0) -> np.ndarray:
        return b.reward

    with pytest.raises(ValueError, match="already registered"):
        register("grpo", checks={"x": _registry.WEIGHT})(ok)
    with pytest.raises(TypeError, match="checks"):
        register("no_checks")(ok)

    def positional(b: StepBatch, x: float = 1.0) -> np.ndarray:
        return b.reward

    with pytest.raises(TypeError, match="keyword-only"):
        register("positional", checks={"x": _registry.WEIGHT})(positional)

    def twin(b: StepBatch, *, y: float = 1.0) -> tuple:
        return b.reward, {"p": b.reward}

    with pytest.raises(TypeError, match="different options"):
        register("twin", checks={"x": _registry.WEIGHT}, terms=twin, term_names=("p",))(ok)
    with pytest.raises(ValueError, match="x=5"):  # a default must pass its own check
        register("bad_default", checks={"x": _registry.DISCOUNT})(
            lambda b, *, x=5: b.reward  # type: ignore[misc]
        )
