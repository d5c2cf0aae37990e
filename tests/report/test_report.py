"""The HTML reports: what a run report holds, the compare form, the CLI and --serve."""

from __future__ import annotations

import gzip
import json
import re
import threading
import urllib.error
import urllib.request

import pytest

from cairn.cli import main
from cairn.report.html import (
    build_compare_report,
    build_report,
    compare_payload,
    read_payload,
    serve,
)
from cairn.report.rundata import Sampling
from cairn.report.synthetic import write_synthetic_run

payload_of = read_payload


def test_report_of_a_tiny_real_run_has_every_section(tiny_run):
    run, _ = tiny_run
    path = build_report(run)
    assert path == run / "report.html"
    html = path.read_text()
    # Self-contained: no external script, style, image or font.
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "<style>" in html and "<script>" in html
    data = payload_of(path)
    assert data["kind"] == "run" and data["title"] == "sokoban_gigpo"
    titles = [p["title"] for p in data["curves"]["panels"]]
    for t in ("success", "return", "invalid rate", "entropy", "seconds per phase"):
        assert t in titles
    success = data["curves"]["panels"][0]["series"]
    assert [s["name"] for s in success] == ["rollout/success", "eval/success"]
    assert data["curves"]["panels"][0]["series"][0]["x"] == [8, 16]  # episodes after it 1, 2
    assert data["evals"]["rows"][0][:2] == [0, 0]  # the untrained evaluation
    assert data["sampling"]["shown"] == [1, 2] and data["sampling"]["dumped"] == 2
    assert data["terms"] == ["A_E", "A_S"] and data["columns"] == ["G"]
    group = data["iterations"][-1]["groups"][0]
    assert len(group["episodes"]) == 4 and group["tree"] is None
    steps = [s for e in group["episodes"] for s in e["steps"]]
    assert all(isinstance(s["A"], float) for s in steps)
    # GiGPO: A = A_E + A_S with step_weight 1 (dump floats have 7 significant digits).
    for s in steps:
        assert s["A"] == pytest.approx(s["q"]["A_E"] + s["q"]["A_S"], abs=1e-5)
    first = {s["a"] for e in group["episodes"] for s in e["steps"] if s["t"] == 0}
    assert len(first) == 1  # all episodes of a group start in one state: one step group


def test_report_matches_the_dumped_records(tiny_run):
    run, _ = tiny_run
    data = payload_of(build_report(run, run / "r.html"))
    with gzip.open(run / "trajectories" / "iter_000002.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    shown = data["iterations"][-1]["groups"]
    by_id = {e["id"]: e for g in shown for e in g["episodes"]}
    assert set(by_id) == {r["id"] for r in recs}
    S = data["strings"]
    for r in recs:
        e = by_id[r["id"]]
        assert e["success"] == r["success"] and e["return"] == pytest.approx(r["return"])
        for st, raw in zip(e["steps"], r["steps"], strict=True):
            assert (S[st["o"]], S[st["a"]], S[st["x"]]) == (
                raw["observation"],
                raw["anchor"],
                raw["action"],
            )
            assert st["A"] == raw["advantage"]


def _prompt_of(steps: list[dict], i: int, strings: list[str]) -> str:
    """report.js's promptOf, in Python: pk characters of the step before's prompt, its pl
    characters from pf, then string pa."""
    text = ""
    for st in steps[: i + 1]:
        copied = text[st["pf"] : st["pf"] + st["pl"]] if "pl" in st else ""
        text = text[: st["pk"]] + copied + strings[st["pa"]]
    return text


def test_the_prompt_the_model_saw_reaches_the_trajectories_and_the_report(tiny_run):
    from cairn.data.episode import prompt_texts

    run, _ = tiny_run
    with gzip.open(run / "trajectories" / "iter_000002.jsonl.gz", "rt") as f:
        recs = [json.loads(line) for line in f]
    for r in recs:
        texts = prompt_texts(r)
        for text, step in zip(texts, r["steps"], strict=True):
            assert text and step["observation"].split()[0] in text  # the turn's observation
    data = payload_of(build_report(run, run / "r.html"))
    by_id = {e["id"]: e for g in data["iterations"][-1]["groups"] for e in g["episodes"]}
    for r in recs:
        steps = by_id[r["id"]]["steps"]
        got = [_prompt_of(steps, i, data["strings"]) for i in range(len(steps))]
        assert got == prompt_texts(r)


def test_report_js_rebuilds_the_prompt_like_the_records(tmp_path):
    """report.js's promptOf, run in node on a made-up episode (skipped without node)."""
    import shutil
    import subprocess
    from pathlib import Path

    import cairn.report

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found")
    js = (Path(cairn.report.__file__).parent / "static" / "report.js").read_text()
    fn = re.search(r"function promptOf\(ep, st\) \{.*?\n\}", js, re.S)
    assert fn, "report.js has no promptOf"
    script = (
        "const S = ['SYS o0', ' up o1', 'fresh', ' o2'];\n"
        "function str(i) { return i === undefined || i === null ? '' : S[i]; }\n"
        + fn.group(0)
        + "\nconst ep = {steps: [{pk: 0, pa: 0}, {pk: 6, pa: 1}, {pk: 3, pf: 6, pl: 3, pa: 3},"
        " {pk: 0, pa: 2}, {}]};\n"
        "console.log(JSON.stringify(ep.steps.map(st => promptOf(ep, st))));\n"
    )
    (tmp_path / "t.js").write_text(script)
    out = subprocess.run([node, str(tmp_path / "t.js")], capture_output=True, text=True)
    want = ["SYS o0", "SYS o0 up o1", "SYS up o2", "fresh", None]
    assert json.loads(out.stdout) == want, out.stderr
    assert "h('details', {cls: 'prompt'}" in js  # collapsed by default (no open attribute)


def test_trees_demonstrations_tips_and_neighbours_reach_the_report(tmp_path):
    trees = write_synthetic_run(tmp_path / "elpo", iterations=2, estimator="elpo", trees=True)
    data = payload_of(build_report(trees))
    group = data["iterations"][-1]["groups"][0]
    assert group["tree"]["exact"] and len(group["tree"]["nodes"]) >= 8
    assert data["terms"] == ["A_b", "A_t"]
    mixed = write_synthetic_run(tmp_path / "mix", iterations=2, demos=True, tips=True)
    data = payload_of(build_report(mixed))
    eps = [e for g in data["iterations"][-1]["groups"] for e in g["episodes"]]
    assert {e["source"] for e in eps} == {0, 1, 2}
    tipped = [s for e in eps if e["source"] == 2 for s in e["steps"]]
    assert all(data["strings"][s["tips"][0]].startswith("move toward") for s in tipped)
    prox = write_synthetic_run(tmp_path / "prox", iterations=2, estimator="proxmo")
    data = payload_of(build_report(prox))
    assert data["tau"] == 0.1
    group = data["iterations"][-1]["groups"][0]
    anchors = {s["a"] for e in group["episodes"] for s in e["steps"]}
    assert set(map(int, group["neighbours"])) == anchors


def test_records_with_missing_fields_and_hostile_text_still_build(tmp_path):
    folder = tmp_path / "trajectories"
    folder.mkdir()
    evil = "</script><script>alert(1)</script>"
    recs = [
        {"group": 3, "steps": [{"action": evil}]},
        {"group": 3, "id": 1, "steps": [{"t": 0, "observation": "x", "advantage": None}]},
        {"group": 3, "id": 2, "steps": [{"t": 0, "reward": 1.0, "shaped": {"overlong": -0.5}}]},
        {"group": 3, "id": 3, "meta": {"score": float("nan")}, "steps": []},
    ]
    with gzip.open(folder / "iter_000004.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    path = build_report(tmp_path)
    assert evil not in path.read_text()  # escaped inside the JSON, never raw HTML
    data = payload_of(path)
    steps = [s for e in data["iterations"][0]["groups"][0]["episodes"] for s in e["steps"]]
    assert data["strings"][steps[0]["x"]] == evil and steps[1]["A"] is None
    # Named shaped reward terms become columns; their sum is kept for the learner's reward.
    assert steps[2]["k"] == {"shaped/overlong": -0.5} and steps[2]["sh"] == -0.5
    assert data["iterations"][0]["groups"][0]["episodes"][3]["meta"] == {"score": None}


def test_compare_payload_bands_worked_example():
    summary = {
        "target": 0.5,
        "configs": {
            "a": {
                "seeds": 2,
                "curves": [[[0, 0.0], [10, 0.5], [20, 1.0]], [[0, 0.2], [20, 0.6]]],
                "episodes_to_target": [10, 20],
                "episodes_to_target_mean": 15.0,
                "reached": "2/2",
                "final_success": [1.0, 0.6],
                "final_success_mean": 0.8,
                "final_success_ci95": 0.392,
                "train_seconds": [3.0, 5.0],
            }
        },
    }
    (c,) = compare_payload(summary)["configs"]
    # Grid: union of x up to the shortest curve's end (20). Seed 2 at x=10 interpolates to
    # 0.4, so the mean there is (0.5 + 0.4)/2 = 0.45, band 0.4..0.5.
    assert c["grid"] == [0, 10, 20]
    assert c["mean"] == pytest.approx([0.1, 0.45, 0.8])
    assert c["lo"] == pytest.approx([0.0, 0.4, 0.6]) and c["hi"] == pytest.approx([0.2, 0.5, 1.0])
    row = compare_payload(summary)["table"]["rows"][0]
    assert row == ["a", 2, "10, 20", "15", "2/2", "1.000, 0.600", "0.800 ± 0.392", "4"]
    with pytest.raises(ValueError, match="'configs' mapping"):
        compare_payload({"target": 1})


def test_cli_inspect_prints_the_path_and_handles_compare_folders(tiny_run, tmp_path, capsys):
    run, _ = tiny_run
    out = tmp_path / "x" / "report.html"
    assert main(["inspect", str(run), "--out", str(out), "--groups", "1"]) == 0
    assert capsys.readouterr().out.strip().endswith(str(out))
    assert len(payload_of(out)["iterations"][0]["groups"]) == 1
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    (cmp_dir / "compare.json").write_text(json.dumps({"target": 0.8, "configs": {}}))
    assert main(["inspect", str(cmp_dir)]) == 0
    assert payload_of(cmp_dir / "compare.html")["kind"] == "compare"
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert main(["inspect", str(run), "--iterations", "0"]) == 2
    assert "Sampling.iterations" in capsys.readouterr().out
    with pytest.raises(ValueError, match="does not exist"):
        build_compare_report(tmp_path)


def test_serve_binds_loopback_only_and_shuts_down(tmp_path):
    page = tmp_path / "r.html"
    page.write_text("<html>hello</html>")
    got: dict = {}
    started = threading.Event()

    def ready(url, server):
        got.update(url=url, server=server)
        started.set()

    th = threading.Thread(target=serve, args=(page,), kwargs={"ready": ready}, daemon=True)
    th.start()
    assert started.wait(10)
    assert got["server"].server_address[0] == "127.0.0.1"
    assert got["url"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(got["url"], timeout=5) as r:
        assert r.read() == b"<html>hello</html>"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(got["url"] + "etc/passwd", timeout=5)
    got["server"].shutdown()
    th.join(5)
    assert not th.is_alive()


def test_serve_stops_by_itself_after_its_time_limit(tmp_path):
    page = tmp_path / "r.html"
    page.write_text("x")
    th = threading.Thread(target=serve, args=(page,), kwargs={"seconds": 0.3}, daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive()
    with pytest.raises(ValueError, match="port must be in"):
        serve(page, 70000)


def test_sampling_from_the_run_config(tiny_run):
    from cairn.report.html import sampling_of

    assert sampling_of(tiny_run[0]) == Sampling(24, 4, 32)


def test_cli_compare_writes_the_html_form(tmp_path, monkeypatch, capsys):
    import cairn.train.compare as compare_mod

    summary = {
        "target": 0.5,
        "configs": {
            name: {
                "seeds": 2,
                "curves": [[[0, 0.1], [64, 0.4 + d]], [[0, 0.0], [64, 0.6 + d]]],
                "episodes_to_target": [None, 64],
                "episodes_to_target_mean": 64.0,
                "reached": "1/2",
                "final_success": [0.4 + d, 0.6 + d],
                "final_success_mean": 0.5 + d,
                "final_success_ci95": 0.196,
                "untrained_success": [0.1, 0.0],
                "train_seconds": [10.0, 12.0],
            }
            for name, d in (("sokoban_grpo", 0.0), ("sokoban_gigpo", 0.2))
        },
    }

    def fake_compare(configs, seeds, out, *args):  # the training part is tested elsewhere
        out.mkdir(parents=True)
        (out / "compare.json").write_text(json.dumps(summary))
        seed1 = out / "sokoban_gigpo" / "seed1"  # one run on disk: its curves get drawn
        seed1.mkdir(parents=True)
        (seed1 / "metrics.jsonl").write_text('{"iteration": 1, "episodes": 8}\n')
        return summary

    monkeypatch.setattr(compare_mod, "compare", fake_compare)
    out = tmp_path / "cmp"
    assert main(["compare", "a.yaml", "b.yaml", "--out", str(out)]) == 0
    assert f"report: {out / 'compare.html'}" in capsys.readouterr().out
    data = read_payload(out / "compare.html")
    assert [c["name"] for c in data["configs"]] == ["sokoban_grpo", "sokoban_gigpo"]
    assert data["table"]["rows"][1][6] == "0.700 ± 0.196"
    drawn = sorted(str(p.relative_to(out)) for p in out.rglob("*.png"))
    assert drawn == ["curves.png", "sokoban_gigpo/seed1/curves.png"]  # by the CLI


def test_cli_train_draws_the_curves(tmp_path, capsys):
    sets = ["rollout.groups=2", "rollout.group_size=4", "optim.epochs=1", "eval.episodes=4"]
    sets += ["train.time_budget_s=null", "train.threads=1", "train.iterations=1"]
    sets += ["log.progress=false", f"out_dir={tmp_path}"]
    assert main(["train", *(f"--set={s}" for s in sets)]) == 0
    (run,) = [p.parent for p in tmp_path.glob("*/summary.json")]
    assert (run / "curves.png").stat().st_size > 1000
    assert "plotting failed" not in capsys.readouterr().out


def test_cli_serve_is_bounded_by_serve_seconds(tiny_run, tmp_path, capsys):
    out = tmp_path / "r.html"
    args = ["inspect", str(tiny_run[0]), "--out", str(out), "--serve", "--serve-seconds", "0.3"]
    assert main(args) == 0
    assert "serving http://127.0.0.1:" in capsys.readouterr().out
