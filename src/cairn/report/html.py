"""Self-contained HTML reports: a run's credit viewer (`build_report`) and a comparison
over seeds (`build_compare_report`), plus a loopback-only server for them (`serve`).

One file each: the data is embedded as JSON and drawn by inline JavaScript and SVG
(``cairn/report/static/``, read by `cairn.report.assets`), so a report opens from disk
with no server and no network.
What a run report shows and how it samples a large run: `cairn.report.payload`,
`cairn.report.rundata`. Advantage estimators and their terms: GiGPO (arXiv 2505.10978),
ProxMO (arXiv 2602.19225), ELPO (arXiv 2602.09598).
"""

from __future__ import annotations

import html
import json
import math
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import numpy as np

from cairn._files import read_text
from cairn.data.rundir import read_config
from cairn.report.assets import CSS, JS
from cairn.report.payload import run_payload
from cairn.report.rundata import Sampling, load_run

__all__ = [
    "allowed_host",
    "build_compare_report",
    "build_report",
    "compare_payload",
    "read_payload",
    "render",
    "serve",
]


def render(payload: Mapping[str, object]) -> str:
    """The HTML page for a payload (``payload["kind"]`` is "run" or "compare")."""
    title = html.escape(str(payload.get("title", "cairn report")))
    sub = html.escape(str(payload.get("run_dir", "")))
    gen = html.escape(str(payload.get("generated", "")))
    data = _dumps(payload).replace("<", "\\u003c")
    links = (
        ""
        if payload.get("kind") == "compare"
        else "".join(
            f'<a href="#{a}">{b}</a>'
            for a, b in [
                ("overview", "Overview"),
                ("curves", "Curves"),
                ("evals", "Evaluations"),
                ("trajectories", "Trajectories"),
                ("config", "Config"),
            ]
        )
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · cairn</title>
<style>
{CSS}</style></head>
<body>
<header><h1>{title}</h1><div class="sub">{sub} · report generated {gen} by cairn</div></header>
<nav>{links}</nav>
<main id="main"></main>
<div id="detail"></div>
<script id="cairn-data" type="application/json">{data}</script>
<script>
{JS}</script>
</body></html>
"""


def read_payload(report: Path) -> dict[str, Any]:
    """The JSON data embedded in a report written by `render` (ValueError if there is none)."""
    text = Path(report).read_text(encoding="utf-8")
    start = text.find(_DATA_TAG)
    end = text.find("</script>", start)
    if start < 0 or end < 0:
        raise ValueError(f"{str(report)!r} holds no cairn report data")
    return json.loads(text[start + len(_DATA_TAG) : end])


_DATA_TAG = '<script id="cairn-data" type="application/json">'


def _finite(obj: object) -> object:
    """NaN and infinities (JSON.parse rejects them) to None, anywhere in ``obj``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _dumps(payload: Mapping[str, object]) -> str:
    try:
        return json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError):  # a NaN or an odd type in free-form fields (meta, extras)
        return json.dumps(_finite(payload), separators=(",", ":"), allow_nan=False, default=str)


def _write(text: str, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out


def build_report(run_dir: Path, out: Path | None = None, sampling: Sampling | None = None) -> Path:
    """Write the run report (default ``RUN_DIR/report.html``) and return its path.

    ``sampling`` defaults to the run config's ``log.report_*`` keys (24 iterations, 4
    groups, 32 episodes when absent). ValueError when ``run_dir`` is not a run directory.
    """
    run_dir = Path(run_dir)
    if sampling is None:
        sampling = sampling_of(run_dir)
    data = load_run(run_dir, sampling)
    return _write(render(run_payload(data, sampling)), out or run_dir / "report.html")


def sampling_of(run_dir: Path) -> Sampling:
    """The sampling rule from the run's ``config.yaml`` (``log.report_*``), else defaults."""
    log = read_config(Path(run_dir)).get("log") or {}
    keys = {"iterations": "report_iterations", "groups": "report_groups"}
    keys["episodes"] = "report_episodes"
    given = {k: log[v] for k, v in keys.items() if isinstance(log.get(v), int)}
    return Sampling(**given)


# -- comparison ---------------------------------------------------------------------------------
def _band(curves: list[list[list[float]]]) -> dict[str, list[float]]:
    """Seeds' (episodes, success) curves on a common grid: mean, min, max (as plot_compare)."""
    arrs = [np.asarray(c, dtype=float).reshape(-1, 2) for c in curves if len(c)]
    if not arrs:
        return {"grid": [], "mean": [], "lo": [], "hi": []}
    grid = np.unique(np.concatenate([a[:, 0] for a in arrs]))
    grid = grid[grid <= min(a[-1, 0] for a in arrs)]
    ys = np.stack([np.interp(grid, a[:, 0], a[:, 1]) for a in arrs])  # (seeds, len(grid))
    return {
        "grid": grid.tolist(),
        "mean": ys.mean(0).tolist(),
        "lo": ys.min(0).tolist(),
        "hi": ys.max(0).tolist(),
    }


def _cell(v: object, digits: int = 3) -> str | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def compare_payload(summary: dict[str, Any], title: str = "comparison") -> dict[str, Any]:
    """The compare report's data from a ``compare.json`` summary."""
    if not isinstance(summary, dict) or not isinstance(summary.get("configs"), dict):
        raise ValueError("a compare summary needs a 'configs' mapping (see compare.json)")
    tgt = summary.get("target")
    configs, rows = [], []
    for name, c in summary["configs"].items():
        curves = c.get("curves") or []
        finals = [float(x) for x in c.get("final_success") or [] if x is not None]
        mean = c.get("final_success_mean", float(np.mean(finals)) if finals else None)
        configs.append(
            {
                "name": name,
                "seeds": c.get("seeds", len(curves)),
                **_band(curves),
                "per_seed": [
                    {"x": [p[0] for p in cv], "y": [p[1] for p in cv]} for cv in curves if cv
                ],
                "finals": finals,
                "final_mean": mean,
                "ci95": c.get("final_success_ci95"),
            }
        )
        per = ", ".join("-" if e is None else str(e) for e in c.get("episodes_to_target") or [])
        ci = c.get("final_success_ci95")
        secs = c.get("train_seconds") or []
        rows.append(
            [
                name,
                c.get("seeds"),
                per,
                _cell(c.get("episodes_to_target_mean"), 0),
                c.get("reached"),
                ", ".join(f"{x:.3f}" for x in finals),
                None if mean is None else f"{mean:.3f}" + ("" if ci is None else f" ± {ci:.3f}"),
                _cell(float(np.mean(secs)) if secs else None, 0),
            ]
        )
    columns = ["config", "seeds", f"episodes to {tgt} (per seed)", "mean", "reached"]
    columns += ["final success (per seed)", "mean ± 95% CI", "train seconds (mean)"]
    return {
        "kind": "compare",
        "title": title,
        "generated": datetime.now().isoformat(timespec="seconds"),
        "target": tgt,
        "configs": configs,
        "table": {"columns": columns, "rows": rows},
    }


def build_compare_report(compare_dir: Path, out: Path | None = None) -> Path:
    """Write ``compare.html`` beside ``compare.json`` (or at ``out``); return its path."""
    compare_dir = Path(compare_dir)
    path = compare_dir / "compare.json"
    try:
        summary = json.loads(read_text(path, COMPARE_JSON_MAX, root=compare_dir))
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} does not exist (run cairn compare first)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not valid JSON: {err}") from None
    payload = compare_payload(summary, title=f"comparison: {compare_dir.name}")
    payload["run_dir"] = str(compare_dir)
    return _write(render(payload), out or compare_dir / "compare.html")


COMPARE_JSON_MAX = 64 << 20  # bytes of compare.json read at most


# -- serving ------------------------------------------------------------------------------------
LOOPBACK = "127.0.0.1"


def allowed_host(host: str | None, port: int) -> bool:
    """Is ``host`` (a request's Host header) this loopback server's own address: localhost,
    127.0.0.1 or [::1] with ``port`` (browsers send the port of a non-default one)? Anything
    else is refused: a DNS-rebinding page reaches 127.0.0.1 under its own name."""
    name, _, given = (host or "").strip().lower().rpartition(":")
    return name in ("localhost", "127.0.0.1", "[::1]") and given == str(port)


#: Connections the kernel queues while every handler is busy (the socketserver default, 5,
#: dropped the connects of a burst: the clients' SYN retries took 1, 3, 7, 15 ... s);
#: handler threads at most; seconds a connection may take to send its request line.
BACKLOG, MAX_HANDLERS, REQUEST_TIMEOUT_S = 1024, 64, 10.0


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most ``MAX_HANDLERS`` at once (the rest wait in a
    ``BACKLOG``-deep accept queue), each given ``REQUEST_TIMEOUT_S`` to send its request."""

    request_queue_size = BACKLOG
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(MAX_HANDLERS)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        self.slots.acquire()  # all busy: stop accepting; the kernel queues the rest
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _handler(page: bytes) -> type[BaseHTTPRequestHandler]:
    class Page(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # a slow-loris connection frees its thread

        def do_GET(self) -> None:
            port = cast(tuple[str, int], self.server.server_address)[1]  # an AF_INET server
            if not allowed_host(self.headers.get("Host"), port):
                self.send_error(400, "unexpected Host header (only localhost is served)")
                return
            if self.path.split("?")[0] not in ("/", "/index.html", "/report.html"):
                self.send_error(404, "only the report is served here")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    return Page


def serve(
    report: Path,
    port: int = 0,
    *,
    seconds: float | None = None,
    ready: Callable[[str, ThreadingHTTPServer], None] | None = None,
) -> None:
    """Serve one report file on http://127.0.0.1:PORT/ until Ctrl-C or ``seconds`` pass; a
    request whose Host header is not this address (`allowed_host`) gets 400.

    Binds the loopback address only; ``port`` 0 picks a free port. ``ready(url, server)``
    is called once listening (tests use it to read the address and stop the server).
    """
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    page = Path(report).read_bytes()
    server = _Server((LOOPBACK, int(port)), _handler(page))
    host, bound = cast(tuple[str, int], server.server_address)[:2]
    url = f"http://{host}:{bound}/"
    timer = None
    if seconds is not None:
        timer = threading.Timer(seconds, server.shutdown)
        timer.daemon = True
        timer.start()
    try:
        if ready is not None:
            ready(url, server)
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        if timer is not None:
            timer.cancel()
        server.server_close()
