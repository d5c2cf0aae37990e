"""The memory allocator of a training process: mimalloc instead of glibc's malloc on Linux.

Why. Under glibc's malloc, a CPU process runs its model slower once it has run an update's
backward pass, and stays slower: twx_smol's first rollout (the same episodes and weights,
8,479 forward tokens) took 12.8 and 12.1 s before an update and 21.2 and 21.0 s after it
(medians of 2 processes), a fixed forward of SmolLM2-135M (8 rows x 128 tokens, no
gradients) 600-750 ms before and 850-1,250 ms after (scratch runs).
Neither the optimizer state, the gradients, the bfloat16 weight copies, hooks, threads nor
garbage collection explain it, and a no-gradient scoring pass of the same batch leaves
nothing behind; the allocator does: with mimalloc preloaded the rollouts after an update
take what they took before it, and the update itself is faster; sokoban_smol's rollouts
slowed less (11-12 s, then 13-15 s), search_qa_smol's after its small first update not
(benchmarks/speed/allocator.py, benchmarks/results/speed/allocator.md).

How. An allocator is chosen before the process starts (the dynamic loader reads
``LD_PRELOAD``), so the ``cairn`` command, for the commands that run a model (``MODEL_COMMANDS``),
executes itself once more, before anything else is done, with ``LD_PRELOAD`` naming the
mimalloc library of the ``cmeel-mimalloc`` package (a dependency on Linux x86-64) and
mimalloc's options ``OPTIONS`` (no transparent huge pages: faulting them in cost an update
~10 s of system time; freed memory kept for the next update). The new process takes the
library out of ``LD_PRELOAD`` again (``settle``), so the processes it starts (env workers,
a JVM, other commands) start as they would have. Nothing changes where the library is
missing, on other systems, when ``LD_PRELOAD`` already names a mimalloc, or with
``CAIRN_ALLOCATOR=system``. Calling ``cairn.cli.main(argv)`` from Python changes nothing:
the allocator of a running interpreter is fixed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

__all__ = [
    "CHOICES",
    "ENV",
    "MODEL_COMMANDS",
    "OPTIONS",
    "allocator_env",
    "current",
    "mimalloc_library",
    "reexec",
    "settle",
]

ENV = "CAIRN_ALLOCATOR"  # mimalloc (the default where available) or system
CHOICES = ("mimalloc", "system")
MODEL_COMMANDS = frozenset({"train", "eval", "compare", "ttrl"})
OPTIONS = {"MIMALLOC_ALLOW_THP": "0", "MIMALLOC_PURGE_DELAY": "-1"}
_PRIOR = "_CAIRN_PRIOR_LD_PRELOAD"  # set in the re-executed process: LD_PRELOAD before it


def mimalloc_library() -> Path | None:
    """The shared mimalloc library of the installed ``cmeel-mimalloc``, or None (not
    installed, not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        dist = metadata.distribution("cmeel-mimalloc")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name.startswith("libmimalloc.so."):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    return None


def allocator_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment that starts a process on mimalloc, or None where ``environ`` needs
    no change or none can be made (module docstring). A bad ``CAIRN_ALLOCATOR`` is a
    ValueError naming it."""
    choice = environ.get(ENV, "mimalloc")
    if choice not in CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(CHOICES)}; got {choice!r}")
    preload = environ.get("LD_PRELOAD", "")
    if choice == "system" or _PRIOR in environ or "mimalloc" in preload:
        return None
    library = mimalloc_library()
    if library is None:
        return None
    env = {**environ, **{k: environ.get(k, v) for k, v in OPTIONS.items()}}
    env["LD_PRELOAD"] = f"{library}:{preload}" if preload else str(library)
    env[_PRIOR] = preload
    return env


def reexec(args: Sequence[str]) -> None:
    """Run ``python ARGS`` in this process's place on mimalloc (the ``cairn`` command
    passes ``-m cairn.cli`` and its arguments); returns, and the process goes on as it is,
    where nothing is to change or the exec fails."""
    env = allocator_env(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *args], env)
    except OSError:
        return  # e.g. the interpreter moved: glibc's allocator, as before


def settle() -> None:
    """In a process ``reexec`` started: ``LD_PRELOAD`` as it was before, so that the
    processes this one starts do not inherit the preload."""
    prior = os.environ.pop(_PRIOR, None)
    if prior is None:
        return
    if prior:
        os.environ["LD_PRELOAD"] = prior
    else:
        os.environ.pop("LD_PRELOAD", None)


def current() -> str:
    """``mimalloc`` when this process runs on mimalloc (its library is mapped), else
    ``system``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "mimalloc" if "libmimalloc" in maps else "system"
