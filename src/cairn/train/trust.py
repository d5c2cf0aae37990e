"""Which user code a run folder's config names, and whether the reader agreed to run it.

A run folder is data: it may come from someone else (read by ``cairn eval``, ``export``,
``inspect``, or continued by ``train --resume``). Its config can name code that loading the
config imports and runs:

    imports                              modules imported before the config is checked
    env.options.KEY                      an option naming a function by import path
                                         (``module:function``); the env declares which of
                                         its options do (``cairn.envs.code_options``: the
                                         dataset env's ``reward`` and ``feedback``)
    curriculum.options.levels[K].KEY     the same options in a curriculum level

Code of cairn's own package (``cairn.envs.dataset:exact_match``) is not user code. An env
that a module of ``imports`` registers is known only once that module has run; naming the
module covers it, and once the consented modules are imported the check runs again.

``require_consent`` reads the config as plain data (parsed YAML: no plugin, no torch) and
refuses, in one line (``UntrustedCode``, a ConfigError: exit status 2), a config that names
user code the reader did not consent to, before anything of it is imported. Consent is
given one of three ways:

- ``--trust-code`` on the command line;
- the same names given with ``--set`` (``--set 'imports=[my_pkg.tasks]'`` on a resume): the
  user typed them;
- the trust store, for runs this user created (``cairn train``, ``cairn compare``,
  ``cairn.train(...)``) or gave names to with ``--set`` on a resume. It lives outside every
  run folder, in ``cache_root()/trusted-runs`` (``$CAIRN_CACHE``, else
  ``~/.cache/cairn/models``): one JSON file per run, named by the sha256 of the run folder's
  real path, holding that path, the sha256 of its config.yaml's bytes (written once at
  creation, never rewritten) and the names. A moved run, or an edited config.yaml, is no
  longer trusted; nothing inside a run folder can grant trust.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn._cache import cache_root
from cairn._errors import ConfigError
from cairn._files import read_bytes
from cairn.data import rundir
from cairn.envs import ENVS, code_options
from cairn.plugins import load_plugins
from cairn.train.checkpoint.runconfig import apply_changes
from cairn.train.configfile import apply_overrides, parse_mapping
from cairn.train.rollout_sections import DEMO_ENV

__all__ = [
    "STORE",
    "NamedCode",
    "TrustStoreWarning",
    "UntrustedCode",
    "named_code",
    "record_run",
    "require_consent",
    "store_dir",
    "trusted_names",
]

STORE = "trusted-runs"  # the store's folder under cache_root()
_RECORD_BYTES = 1 << 20


class UntrustedCode(ConfigError):
    """A run folder's config names user code the reader has not consented to run."""


class TrustStoreWarning(UserWarning):
    """The trust store could not record a run (a read-only cache folder)."""


@dataclass(frozen=True)
class NamedCode:
    """One piece of user code a config names: ``key`` (``imports``, ``env.options.reward``),
    ``value`` (the module or ``module:function``) and ``path``, where it sits in the config
    mapping (a module of ``imports`` sits in the list at ``("imports",)``)."""

    key: str
    value: str
    path: tuple[str | int, ...]

    def __str__(self) -> str:
        return f"{self.key} {self.value}"


# -- what a config names --------------------------------------------------------------------
def named_code(data: Mapping[str, object]) -> list[NamedCode]:
    """The user code config ``data`` (a plain mapping, as parsed) names (module docstring);
    imports nothing."""
    found = [NamedCode("imports", m, ("imports",)) for m in _strings(data.get("imports"))]
    env = _mapping(data.get("env"))
    name = env.get("name", DEMO_ENV[0])
    keys = code_options(name) if isinstance(name, str) else ()
    found += _options(env.get("options"), keys, ("env", "options"))
    levels = _mapping(_mapping(data.get("curriculum")).get("options")).get("levels")
    for k, level in enumerate(levels if isinstance(levels, list) else []):
        found += _options(level, keys, ("curriculum", "options", "levels", k))
    return [c for c in found if not _cairns_own(c.value)]


def _strings(value: object) -> list[str]:
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [x for x in items if isinstance(x, str)]


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _options(options: object, keys: Sequence[str], path: tuple[str | int, ...]) -> list[NamedCode]:
    found = []
    for key in keys:
        value = _mapping(options).get(key)
        if isinstance(value, str):
            found.append(NamedCode(_dotted((*path, key)), value, (*path, key)))
    return found


def _dotted(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _cairns_own(value: str) -> bool:
    """A module of cairn's package, or a plain function name in one."""
    module, _, attr = value.partition(":")
    return (module == "cairn" or module.startswith("cairn.")) and (not attr or attr.isidentifier())


# -- the run folder's config, as data --------------------------------------------------------
@dataclass(frozen=True)
class _RunConfig:
    """The configs a command may run from a run folder (config.yaml, and with a resume each
    amendment prefix, each with the command's ``--set`` items) and config.yaml's sha256."""

    versions: list[dict[str, Any]]
    sha256: str

    def names(self) -> list[NamedCode]:
        seen = {c: None for v in self.versions for c in named_code(v)}
        return list(seen)

    def needs_plugins(self) -> bool:
        """Names a module, or an env not registered yet (an entry point may register it)."""
        envs = [_mapping(v.get("env")).get("name", DEMO_ENV[0]) for v in self.versions]
        return any(_strings(v.get("imports")) for v in self.versions) or any(
            isinstance(e, str) and e not in ENVS.entries for e in envs
        )

    def imports(self) -> list[str]:
        return list(dict.fromkeys(m for v in self.versions for m in _strings(v.get("imports"))))


def _read(run_dir: Path, overrides: Sequence[str], amendments: bool) -> _RunConfig | None:
    """config.yaml read once (a regular file of the run, bounded), hashed and parsed by the
    config loader; None when there is none (the command then says so itself)."""
    path = run_dir / rundir.CONFIG
    try:
        raw = read_bytes(path, rundir.LIMITS[rundir.CONFIG], root=run_dir)
        base = parse_mapping(raw.decode(), str(path), allow_empty=False)
        versions = [base, *(_amended(run_dir, base) if amendments else [])]
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, a bad amendments line
        if isinstance(err, ConfigError):
            raise
        text = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{run_dir}: {' '.join(text.split())}") from None
    for data in versions:
        apply_overrides(data, list(overrides))
    return _RunConfig(versions, hashlib.sha256(raw).hexdigest())


def _amended(run_dir: Path, base: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``base`` with the amendments of iterations <= t applied, for each iteration t that
    has one: a resume applies those of its checkpoint's iteration, which the checkpoint's
    own files say (not read here, so every prefix counts)."""
    rows = [r for r in rundir.read_amendments(run_dir) if isinstance(r.get("changes"), list)]
    stamps = sorted({r["iteration"] for r in rows if isinstance(r.get("iteration"), int)})
    for t in stamps:
        data = copy.deepcopy(base)
        for row in rows:
            if isinstance(row.get("iteration"), int) and row["iteration"] <= t:
                apply_changes(data, [c for c in row["changes"] if _is_change(c)])
        yield data


def _is_change(change: object) -> bool:
    return isinstance(change, dict) and isinstance(change.get("key"), str)


# -- consent -----------------------------------------------------------------------------------
def require_consent(
    run_dir: str | Path,
    command: str,
    *,
    trust: bool = False,
    overrides: Sequence[str] = (),
    amendments: bool = False,
) -> list[NamedCode]:
    """Refuse, in one line (UntrustedCode), to let ``command`` read ``run_dir`` when its
    config names user code the reader has not consented to (module docstring). Nothing
    named is imported before consent; after it, the consented modules are imported to see
    what the envs they register name. ``overrides``: the command's ``--set`` items (their
    names are consent); ``amendments``: the command replays amendments.jsonl (a resume).
    Returns the names consented with ``--set``."""
    run_dir = Path(run_dir)
    if trust:
        return []
    run = _read(run_dir, overrides, amendments)
    if run is None:
        return []
    given = apply_overrides({}, list(overrides))
    _refuse_unconsented(run, run_dir, command, given)
    if run.needs_plugins():
        load_plugins(run.imports())  # every module is consented: checked just above
        _refuse_unconsented(run, run_dir, command, given)
    return [c for c in run.names() if _given(c, given)]


def _refuse_unconsented(
    run: _RunConfig, run_dir: Path, command: str, given: Mapping[str, object]
) -> None:
    names = [c for c in run.names() if not _given(c, given)]
    if names and not set(map(str, names)) <= trusted_names(run_dir, run.sha256):
        raise UntrustedCode(_refusal(run_dir, command, names))


def _given(name: NamedCode, given: Mapping[str, object]) -> bool:
    """Was ``name`` given on the command line (``--set``) at its place in the config?"""
    node: Any = given
    for part in name.path:
        in_list = isinstance(part, int) and isinstance(node, list) and part < len(node)
        if not (in_list or (isinstance(node, Mapping) and part in node)):
            return False
        node = node[part]
    return node == name.value or (isinstance(node, list) and name.value in node)


def _refusal(run_dir: Path, command: str, names: Sequence[NamedCode]) -> str:
    listed = ", ".join(map(str, names))
    text = (
        f"cairn {command} {run_dir}: its config names code that would be imported and run "
        f"({listed}); nothing of it ran. If you trust where this run came from, pass "
        "--trust-code"
    )
    if command.endswith("--resume"):
        text += f", or give the same names with --set ({_set_hint(names)})"
    return text


def _set_hint(names: Sequence[NamedCode]) -> str:
    modules = [c.value for c in names if c.key == "imports"]
    items = [f"--set 'imports=[{', '.join(modules)}]'"] if modules else []
    items += [f"--set {c.key}={c.value}" for c in names if c.key != "imports"]
    return " ".join(items)


# -- the trust store ---------------------------------------------------------------------------
def store_dir() -> Path:
    """The trust store's folder (module docstring)."""
    return cache_root() / STORE


def _record_path(run_dir: Path) -> tuple[Path, str]:
    real = os.path.realpath(run_dir)
    return store_dir() / f"{hashlib.sha256(real.encode()).hexdigest()}.json", real


def trusted_names(run_dir: str | Path, config_sha256: str) -> set[str]:
    """The names the store trusts for ``run_dir`` while its config.yaml hashes to
    ``config_sha256`` (``str(NamedCode)``); empty when it holds no such record."""
    path, real = _record_path(Path(run_dir))
    try:
        record = json.loads(read_bytes(path, _RECORD_BYTES))
    except (OSError, ValueError):
        return set()
    if not isinstance(record, dict) or record.get("run") != real:
        return set()
    if record.get("config_sha256") != config_sha256:
        return set()
    return {c for c in record.get("code", []) if isinstance(c, str)}


def record_run(run_dir: str | Path, names: Iterable[NamedCode | str]) -> None:
    """Trust ``names`` for ``run_dir`` from now on, with its config.yaml as it is now (added
    to what the store trusts for it already). A store that cannot be written is a
    TrustStoreWarning: later readers of the run then need ``--trust-code``."""
    run_dir = Path(run_dir)
    wanted = {str(c) for c in names}
    if not wanted:
        return
    path, real = _record_path(run_dir)
    try:
        sha = hashlib.sha256((run_dir / rundir.CONFIG).read_bytes()).hexdigest()
        code = sorted(wanted | trusted_names(run_dir, sha))
        text = json.dumps({"run": real, "config_sha256": sha, "code": code}, indent=1)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(
            f"the trust store {store_dir()} could not record {run_dir} "
            f"({err.strerror or err}): reading that run later needs --trust-code",
            TrustStoreWarning,
            stacklevel=2,
        )
