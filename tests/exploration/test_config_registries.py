"""Config keys that name a registry entry are checked against the registry at load: a name
registered at run time is accepted, an unknown one fails listing the registered names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cairn._errors import ConfigError
from cairn._registry import ImportRegistry
from cairn.exploration.registries import EMBEDDERS, GENERATORS, SOURCES, WRITERS
from cairn.policies.engines import ENGINES
from cairn.train.config import load_config

# (config key, its registry, an existing entry to register again under a new name)
KEYS = [
    ("exploration.memory.writer", WRITERS, "cairn.exploration.tips:TemplateTipWriter"),
    ("exploration.memory.embedder", EMBEDDERS, "cairn.exploration.embed:TfidfEmbedder"),
    ("exploration.demos.source", SOURCES, "cairn.exploration.demos:SolverDemos"),
    ("exploration.variants.generator", GENERATORS, "cairn.exploration.variants:SymbolicVariants"),
    ("rollout.engine", ENGINES, "cairn.policies.engines:HFEngine"),
]


@pytest.fixture
def registered() -> Iterator[list[ImportRegistry]]:
    """Registries to which a test adds ``my_entry``; it is removed again afterwards."""
    touched: list[ImportRegistry] = []
    yield touched
    for registry in touched:
        registry.entries.pop("my_entry", None)


def _get(cfg: object, key: str) -> object:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(("key", "registry", "target"), KEYS, ids=[k[0] for k in KEYS])
def test_a_name_registered_at_run_time_is_accepted(
    key: str, registry: ImportRegistry, target: str, registered: list[ImportRegistry]
) -> None:
    with pytest.raises(ConfigError, match="my_entry"):  # not yet registered
        load_config(None, [f"{key}=my_entry"])
    registered.append(registry)
    registry.register("my_entry", target)
    assert _get(load_config(None, [f"{key}=my_entry"]), key) == "my_entry"


def test_an_unknown_name_fails_at_load_listing_the_registered_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["exploration.memory.writer=poet"])
    assert str(err.value) == (
        "invalid config: exploration.memory.writer = 'poet': unknown tip writer 'poet'; "
        "available: policy, template"
    )
    with pytest.raises(
        ConfigError, match=r"unknown embedder 'bert'; available: auto, minilm, tfidf"
    ):
        load_config(None, ["exploration.memory.embedder=bert"])
    with pytest.raises(ConfigError, match=r"unknown demo source 'web'; available: jsonl, solver"):
        load_config(None, ["exploration.demos.source=web"])
    with pytest.raises(
        ConfigError, match=r"unknown variant generator 'x'; available: llm, symbolic"
    ):
        load_config(None, ["exploration.variants.generator=x"])
    with pytest.raises(ConfigError, match=r"unknown rollout engine 'sglang'; available: hf, vllm"):
        load_config(None, ["rollout.engine=sglang"])


def test_options_of_an_enabled_part_are_checked_at_load() -> None:
    on = ["exploration.memory.enabled=true", "exploration.memory.writer_options={rhyme: 1}"]
    with pytest.raises(ConfigError, match="tip writer 'template' has no option 'rhyme'"):
        load_config(None, on)
    # the policy and the prompt builder come from the trainer: never options
    on[1] = "exploration.memory.writer_options={policy: 1}"
    with pytest.raises(ConfigError, match="tip writer 'template' has no option 'policy'"):
        load_config(None, on)
    variants = ["exploration.variants.enabled=true", "exploration.variants.generator_options="]
    with pytest.raises(ConfigError, match="variant generator 'symbolic' has no option 'depth'"):
        load_config(None, [variants[0], variants[1] + "{depth: 2}"])
    cfg = load_config(None, [variants[0], variants[1] + "{max_steps: 4}"])
    assert cfg.exploration.variants.generator_options == {"max_steps": 4}


def test_options_of_a_disabled_part_are_left_alone() -> None:
    cfg = load_config(None, ["exploration.demos.options={anything: 1}"])
    assert cfg.exploration.demos.options == {"anything": 1}


def test_check_name_imports_nothing() -> None:
    reg = ImportRegistry("widget", {"absent": ("cairn_no_such_module:Thing", "extra-x")})
    assert reg.check_name("absent") == "absent"  # its module is never imported
    with pytest.raises(ValueError, match=r"^unknown widget 'b'; available: absent$"):
        reg.check_name("b")
