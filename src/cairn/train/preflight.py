"""Preflight: the checks of a config that need a registry, an env, a model file or a probe.

``cairn.train.schema`` checks types, ranges and rules between keys; ``check_config`` checks
the rest, before any work (the CLI, ``load_config`` and ``Trainer`` call it):

    plugins     the modules of ``imports`` and the packages' entry points (cairn.plugins), first
    env         the env is registered, takes these options, and builds with them (then closed)
    model       ``model.path`` is an embedded model, a model folder, or a hub id (offline: in
                the local Hugging Face cache)
    rollout     the strategy and the generation engine take these options
    advantage   the estimator takes these options; rewards likewise, each
    log         the loggers are registered
    exploration the tip writer, embedder, demo source and variant generator are registered
                and, where enabled, take their options
    curriculum  the curriculum is registered, takes these options, and every level's env
                options build the env
    tiny keys   keys of the tiny default model given with a pretrained one (warning), the
                tiny model's warm-up rate with a pretrained one (error)
    warm-up     the tiny model's word-level tokenizer cannot write tool-call demonstrations

Each problem reads as the schema's do (``key = value: what is allowed``); the problems of
the sections are gathered into one ConfigError, cheap checks first: a problem found there is
reported before the checks that import torch (the rollout strategy, an embedded model) run.
"""

from __future__ import annotations

import os
import socket
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn._errors import ConfigError

if TYPE_CHECKING:
    from cairn._registry import ImportRegistry
    from cairn.exploration.config import MemorySection
from cairn.plugins import load_plugins
from cairn.train.problems import config_problem, config_problems
from cairn.train.rollout_sections import TINY_MODEL_KEYS, check_model_path
from cairn.train.schema import Config

__all__ = [
    "TinyKeyWarning",
    "check_config",
    "hub_cache_problem",
    "tiny_key_problems",
    "warn_tiny_keys",
]

#: One check: (key, value shown, a function raising ValueError or ImportError).
_Check = tuple[str, Any, Callable[[], None]]


class TinyKeyWarning(UserWarning):
    """A key of the tiny default model, set in a config of a pretrained model (ignored)."""


def check_config(cfg: Config) -> None:
    """Every check of ``cfg`` that needs a registry, an env, a model file or a probe (the
    module docstring lists them); ConfigError naming the key, the value and what is
    allowed. The plugins ``cfg.imports`` names are imported first."""
    load_plugins(cfg.imports)
    for checks in (_cheap_checks(cfg), _costly_checks(cfg)):
        problems = []
        for key, value, check in checks:
            try:
                check()
            except (ValueError, ImportError) as err:
                problems.append(config_problem(key, value, str(err)))
        if problems:
            raise ConfigError(config_problems(problems))
    errors, notes = tiny_key_problems(cfg)
    if not errors and cfg.warmup.enabled and cfg.agent.action_format == "tool_call":
        errors = [p for p in [_word_level_tool_calls(cfg)] if p is not None]
    if errors:
        raise ConfigError(config_problems([config_problem("", {}, errors[0])]))
    warn_tiny_keys(notes)


# -- the checks, in the order of the config's sections ---------------------------------------------
def _cheap_checks(cfg: Config) -> Iterator[_Check]:
    """Checks that import an env, numpy or a small module, not torch."""
    from cairn.envs import ENVS

    # unknown keys, then values: the env is built once and closed
    yield "env", {}, lambda: ENVS.probe(cfg.env.name, cfg.env.options)
    if cfg.eval.env_options:
        yield "eval.env_options", {}, lambda: ENVS.probe(cfg.env.name, cfg.eval_env_options())
    yield "model.path", cfg.model.path, lambda: _model_path_shape(cfg.model.path)
    yield "advantage", {}, lambda: _estimator(cfg.advantage.name, cfg.advantage.options)
    for i, spec in enumerate(cfg.rewards):
        yield f"rewards.{i}", {}, partial(_reward, spec.name, spec.options)
    yield "log.loggers", cfg.log.loggers, lambda: _loggers(cfg.log.loggers)
    yield from _exploration_checks(cfg)
    yield "curriculum", {}, lambda: _curriculum(cfg)


def _costly_checks(cfg: Config) -> Iterator[_Check]:
    """Checks that import torch (the rollout package, the policies package)."""
    yield "model.path", cfg.model.path, lambda: _embedded_or_hub_model(cfg.model.path)
    yield "rollout", {}, lambda: _rollout(cfg)


def _estimator(name: str, options: Mapping[str, object]) -> None:
    from cairn.advantages import validate_options

    validate_options(name, options)


def _reward(name: str, options: Mapping[str, object]) -> None:
    from cairn.rewards import validate_reward_options

    validate_reward_options(name, options)


def _curriculum(cfg: Config) -> None:
    from cairn.train.curriculum import check_curriculum

    check_curriculum(cfg)


def _loggers(names: list[str]) -> None:
    from cairn.train.loggers import available_loggers

    unknown = [x for x in names if x not in available_loggers()]
    if unknown:
        raise ValueError(f"unknown logger(s) {unknown}; allowed: {available_loggers()}")


def _rollout(cfg: Config) -> None:
    from cairn.policies.engines import validate_engine_options
    from cairn.rollout import STRATEGIES

    STRATEGIES.probe(cfg.rollout.strategy, cfg.rollout.options)
    validate_engine_options(cfg.rollout.engine, cfg.rollout.engine_options)


def _exploration_checks(cfg: Config) -> Iterator[_Check]:
    """The registered parts of ``exploration`` (EMPO2 memory, LUFFY demonstrations, LADDER
    variants): their names always, their options where the section is enabled."""
    from cairn.exploration.registries import EMBEDDERS, GENERATORS, SOURCES, WRITERS

    x, at = cfg.exploration, "exploration"
    names = [
        (f"{at}.memory.embedder", x.memory.embedder, EMBEDDERS),
        (f"{at}.memory.writer", x.memory.writer, WRITERS),
        (f"{at}.demos.source", x.demos.source, SOURCES),
        (f"{at}.variants.generator", x.variants.generator, GENERATORS),
    ]
    for key, name, registry in names:
        yield key, name, partial(_registered, registry, name)
    known = {key for key, name, registry in names if name in registry.entries}
    if {f"{at}.memory.embedder", f"{at}.memory.writer"} <= known:
        yield f"{at}.memory", {}, lambda: _memory(x.memory)
    if f"{at}.demos.source" in known and x.demos.enabled:
        yield f"{at}.demos", {}, lambda: SOURCES.validate(x.demos.source, x.demos.options)
    if f"{at}.variants.generator" in known and x.variants.enabled:
        gen, opts = x.variants.generator, x.variants.generator_options
        yield f"{at}.variants", {}, lambda: GENERATORS.validate(gen, opts, ("policy",))


def _registered(registry: ImportRegistry, name: str) -> None:
    registry.check_name(name)  # ValueError listing the registered names


def _memory(memory: MemorySection) -> None:
    from cairn.exploration.config import check_mode_probs
    from cairn.exploration.registries import WRITERS

    check_mode_probs(memory.probs)
    if memory.enabled:
        WRITERS.validate(memory.writer, memory.writer_options, ("policy", "prompt"))


# -- model.path ------------------------------------------------------------------------------------
def _is_name(path: str) -> bool:
    """A model.path with no '/' that names no file: an embedded model's alias, or a typo."""
    return "/" not in path and not Path(path).expanduser().exists()


def _model_path_shape(path: str | None) -> None:
    """A folder that is a model, or a hub id's shape 'org/name': checked without torch."""
    if path is not None and not _is_name(path):
        check_model_path(path)


def _embedded_or_hub_model(path: str | None) -> None:
    """An embedded model's package installed; a hub id found where it can be read."""
    if path is None:
        return
    if _is_name(path):
        from cairn.policies.smol import ALIASES, gguf_path

        if path in ALIASES:  # an embedded model: its package must be installed
            gguf_path(path)
            return
        try:
            check_model_path(path)
        except ValueError as err:  # name the aliases too: a mistyped one lands here
            raise ValueError(f"{err}; embedded models: {', '.join(ALIASES)}") from None
    elif not Path(path).expanduser().exists() and (problem := hub_cache_problem(path)):
        raise ValueError(problem)  # a hub id (its shape was checked) that cannot load now


def hub_cache_problem(repo_id: str, probe_s: float = 1.5) -> str | None:
    """Why hub id ``repo_id`` cannot be loaded now (None when it can). In the local Hugging
    Face cache and the hub unreachable (``HF_HUB_OFFLINE`` set, or no connection within
    ``probe_s``): the hub is switched off for this process, so the model loads from the
    cache at once instead of retrying the network for minutes. Not in the cache and
    offline: a one-line problem saying so."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    if not offline and _hub_reachable(probe_s):
        return None  # online: the hub resolves it (and downloads it when needed)
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        os.environ["HF_HUB_OFFLINE"] = "1"
        constants.HF_HUB_OFFLINE = True  # read at import by huggingface_hub and transformers
        return None
    return (
        f"hub id {repo_id!r} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) "
        "and the hub cannot be reached (offline): download it where there is a network "
        f"(huggingface-cli download {repo_id}), or set model.path to a local model folder"
    )


def _hub_reachable(timeout_s: float) -> bool:
    """Whether a TCP connection to the Hugging Face hub opens within ``timeout_s`` (name
    lookup included: it runs in a thread that is abandoned if it hangs)."""
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    result: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host or "huggingface.co", 443), timeout=timeout_s).close()
            result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout_s)
    return bool(result and result[0])


# -- rules between keys that need more than the schema ---------------------------------------------
def tiny_key_problems(cfg: Config) -> tuple[list[str], list[str]]:
    """(errors, warnings) for tiny-model-only keys given with a pretrained model.

    Keys of the tiny model's build (its architecture, local tokenizer and vocabulary) are
    ignored with ``model.path``: a warning names each one given a non-default value (a
    resolved config.yaml lists every key at its default). The format warm-up at the
    default ``warmup.lr`` (a random model's rate, ``WarmupConfig``) is an error, given or
    not: it would overwrite what the pretrained model knows.
    """
    m = cfg.model
    if m.path is None:
        return [], []
    fields = type(m).model_fields
    given = [k for k in TINY_MODEL_KEYS if k in m.model_fields_set]
    ignored = [k for k in given if getattr(m, k) != fields[k].default]
    notes = [
        f"model.{k}={getattr(m, k)!r} is a key of the tiny default model; ignored with "
        f"model.path {m.path!r} (its own tokenizer and architecture are used)"
        for k in ignored
    ]
    w = cfg.warmup
    tiny_lr = type(w).model_fields["lr"].default
    errors = []
    if w.enabled and w.lr == tiny_lr:  # given or not: sokoban_text writes the default out
        errors.append(
            f"warmup.enabled with model.path {m.path!r} uses warmup.lr {w.lr}, the rate for "
            "a randomly initialised tiny model; set a lower warmup.lr (e.g. 1e-4) or "
            "warmup.enabled=false"
        )
    return errors, notes


def warn_tiny_keys(notes: list[str]) -> None:
    """Each note as a ``TinyKeyWarning``, attributed to ``check_config``: the same note from
    the CLI's check and the trainer's is shown once (Python's default warning filter)."""
    for note in notes:
        warnings.warn(note, TinyKeyWarning, stacklevel=2)


def _word_level_tool_calls(cfg: Config) -> str | None:
    """Why the format warm-up cannot write ``tool_call`` demonstrations with the tiny
    model's word-level tokenizer (None when it can): a demonstration not constrained to the
    env's admissible actions is written as JSON, whose characters a word-level tokenizer
    has no tokens for (the warm-up would fail after the model and envs are built)."""
    if cfg.model.path is not None or cfg.model.tokenizer not in ("word", "auto"):
        return None
    from cairn.envs import make

    try:
        env = make(cfg.env.name, **cfg.env.options)
        try:
            _, info = env.reset(seed=0)
            words = env.vocabulary()
        finally:
            env.close()
    except Exception:  # the env's own checks report it
        return None
    if cfg.model.tokenizer == "auto" and not words:
        return None  # a BPE tokenizer: it writes JSON
    if cfg.rollout.restrict_to_admissible and info.get("admissible"):
        return None  # demonstrations are the admissible actions' own tokens
    return (
        "warmup.enabled with agent.action_format 'tool_call': the tiny model's word-level "
        f"tokenizer (env {cfg.env.name!r}) cannot write the JSON tool calls the warm-up "
        "teaches; set model.tokenizer: chat (or bpe), or warmup.enabled: false"
    )
