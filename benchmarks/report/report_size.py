"""Report size and build time of `cairn inspect` on synthetic run directories.

Two runs, written by `cairn.report.synthetic.write_synthetic_run` through the real
dump code (to_step_batch -> GiGPO estimate_terms -> to_records -> RunLog.trajectories):

    demo      200 iterations x 32 groups x 8 episodes, 4 groups dumped per iteration
              (the demo's log.trajectory_groups), 51,200 episodes trained, 6,400 dumped;
    100k      200 iterations x 63 groups x 8 episodes, every group dumped: 100,800 episodes.

For each: the dump size on disk, the time of `build_report` with the default sampling
(24 iterations, 4 groups, 32 episodes; best of ``--repeat``), and the report's size; then
the 100k run once more with no sampling at all (every dumped episode in the report).

    .venv/bin/python benchmarks/report/report_size.py [--out DIR] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import tempfile
import time
from pathlib import Path

from cairn.report.html import build_report
from cairn.report.rundata import Sampling
from cairn.report.synthetic import write_synthetic_run

CASES = {
    "demo": {"iterations": 200, "groups": 32, "group_size": 8, "dumped_groups": 4},
    "100k": {"iterations": 200, "groups": 63, "group_size": 8, "dumped_groups": 63},
}


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(
    run: Path, name: str, spec: dict[str, int], repeat: int, sampling: Sampling
) -> dict[str, object]:
    gen = None
    if not run.exists():
        t0 = time.perf_counter()
        write_synthetic_run(run, **spec)
        gen = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        path = build_report(run, run / "report.html", sampling=sampling)
        times.append(time.perf_counter() - t0)
    episodes = spec["iterations"] * spec["groups"] * spec["group_size"]
    dumped = spec["iterations"] * spec["dumped_groups"] * spec["group_size"]
    shown = sum(
        min(sampling.episodes, spec["group_size"]) * min(sampling.groups, spec["dumped_groups"])
        for _ in range(min(sampling.iterations, spec["iterations"]))
    )
    return {
        "run": name,
        "episodes": episodes,
        "dumped episodes": dumped,
        "dumps on disk": _mib(_size(run / "trajectories")),
        "sampling (M it, K groups, E eps)": (
            f"{sampling.iterations}, {sampling.groups}, {sampling.episodes}"
        ),
        "episodes in report": shown,
        "report build (best)": f"{min(times):.2f} s",
        "report size": _mib(path.stat().st_size),
        "generate run": "-" if gen is None else f"{gen:.0f} s",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the markdown table here")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="20 iterations instead of 200")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cairn-report-bench-"))
    rows = []
    try:
        for name, spec in CASES.items():
            spec = {**spec, "iterations": 20} if args.quick else spec
            rows.append(measure(root / name, name, spec, args.repeat, Sampling()))
            print(rows[-1], flush=True)
        # The same 100k run with no sampling at all: why the report samples.
        everything = Sampling(iterations=spec["iterations"], groups=spec["groups"], episodes=8)
        rows.append(measure(root / "100k", "100k, unsampled", spec, 1, everything))
        print(rows[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    table = "\n".join(lines)
    print(table)
    if args.out:
        host = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        Path(args.out).write_text(f"<!-- measured on {host} -->\n{table}\n")


if __name__ == "__main__":
    main()
