"""benchmarks/real/real_models.py: what it reads back from a run folder, and its table's sums."""

from __future__ import annotations

import json

from benchload import load_bench


def _bench():
    return load_bench("real/real_models.py", "real_models_bench")


def _row(it: int, fmt: float, rollout: float, update: float) -> dict:
    return {
        "iteration": it, "steps": 32, "rollout/completion_tokens": 20.0,
        "rollout/format_error_rate": fmt, "rollout/invalid_rate": 2 * fmt,
        "rollout/success": 0.0, "time/rollout": rollout,
        "update/forward_tokens": 6400, "time/update": update, "time/iteration": rollout + update,
    }  # fmt: skip


def test_a_run_folder_gives_before_after_and_median_rates(tmp_path):
    run = tmp_path / "countdown_smol-s0" / "countdown_smol-s0-20261204"
    run.mkdir(parents=True)
    evals = [
        {"iteration": 0, "eval/success": 0.0, "eval/format_error_rate": 0.5},
        {"iteration": 3, "eval/success": 0.25, "eval/format_error_rate": 0.0},
    ]
    summary = {"iterations": 3, "episodes": 96, "train_seconds": 600.0, "evals": evals}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = [_row(1, 0.3, 64.0, 100.0), _row(2, 0.1, 32.0, 200.0), _row(3, 0.0, 16.0, 50.0)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _bench().summarize(run.parent, "countdown_smol", 0, 5.5, 700.0)
    assert (r["success_before"], r["success_after"]) == (0.0, 0.25)
    assert (r["eval_format_before"], r["eval_format_after"]) == (0.5, 0.0)
    assert (r["sampled_format_first"], r["sampled_format_last"]) == (0.3, 0.0)
    # 32 x 20 = 640 generated tokens over 64, 32, 16 s: 10, 20, 40 -> median 20
    assert r["gen_tokens_per_s"] == 20.0
    assert r["update_tokens_per_s"] == 64.0  # 6400 over 100, 200, 50 s: 64, 32, 128
    assert r["seconds_per_iteration"] == 164.0 and r["peak_rss_gib"] == 5.5
    assert r["evals"] == [[0, 0.0], [3, 0.25]]  # every held-out point, for the curve
    assert r["entropy_first3"] is None and r["entropy_min"] is None  # no actor/entropy logged


def test_entropy_columns_and_the_curves_png(tmp_path):
    bench = _bench()
    run = tmp_path / "countdown_smol-s0" / "countdown_smol-s0-20261205"
    run.mkdir(parents=True)
    evals = [{"iteration": 0, "eval/success": 0.0, "eval/format_error_rate": 0.0}] * 2
    summary = {"iterations": 4, "episodes": 128, "train_seconds": 60.0, "evals": evals}
    (run / "summary.json").write_text(json.dumps(summary))
    entropies = [0.6, 0.5, 0.1, 0.3]
    rows = [{**_row(i + 1, 0.0, 1.0, 1.0), "actor/entropy": h} for i, h in enumerate(entropies)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = bench.summarize(run.parent, "countdown_smol", 0, 1.0, 70.0)
    assert (r["entropy_first3"], r["entropy_last3"], r["entropy_min"]) == (0.4, 0.3, 0.1)
    png = tmp_path / "record.png"
    bench.plot([r], tmp_path, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_three_iteration_windows_weigh_iterations_by_steps(tmp_path):
    run = tmp_path / "search_qa_smol-s1" / "search_qa_smol-s1-20261204"
    run.mkdir(parents=True)
    evals = [{"eval/success": 0.0, "eval/format_error_rate": 0.0}] * 2
    summary = {"iterations": 4, "episodes": 64, "train_seconds": 9.0, "evals": evals}
    (run / "summary.json").write_text(json.dumps(summary))
    rates, steps = [0.5, 0.25, 0.0, 0.1], [40, 20, 40, 60]
    rows = [
        {**_row(i + 1, f, 1.0, 1.0), "steps": n}
        for i, (f, n) in enumerate(zip(rates, steps, strict=True))
    ]
    rows[3]["rollout/success"] = 0.5
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _bench().summarize(run.parent, "search_qa_smol", 1, 1.0, 1.0)
    assert r["sampled_format_first3"] == 0.25  # (20 + 5 + 0) / 100 steps
    assert r["sampled_format_last3"] == 0.0917  # (5 + 0 + 6) / 120, rounded
    assert (r["rollout_success_first3"], r["rollout_success_last3"]) == (0.0, 0.25)  # 30 / 120
    # Invalid actions, format errors included (twice the format rate in these rows).
    assert (r["sampled_invalid_first3"], r["sampled_invalid_last3"]) == (0.5, 0.1833)
    (run.parent / "result.json").write_text(json.dumps({**r, "sampled_format_last3": None}))
    again = _bench().resummarize(run.parent)  # a finished run read again from its folder
    assert again == r and json.loads((run.parent / "result.json").read_text()) == r


def test_the_table_gives_mean_and_range_over_seeds():
    mod = _bench()
    assert mod.spread([0.0, 0.25, 0.5]) == "0.25 (0.00-0.50)"
    keys = ["success_before", "success_after", "eval_format_before", "eval_format_after",
            "sampled_format_first3", "sampled_format_last3", "sampled_invalid_first3",
            "sampled_invalid_last3", "rollout_success_first3",
            "rollout_success_last3", "iterations", "seconds_per_iteration",
            "gen_tokens_per_s", "update_tokens_per_s", "peak_rss_gib"]  # fmt: skip
    results = [{"preset": "p", "seed": s, **dict.fromkeys(keys, float(s))} for s in (1, 3)]
    line = mod.table(results).splitlines()[2]
    assert line.startswith("| p | 1,3 | 2.00 (1.00-3.00) |") and line.endswith("| 2.0 (1.0-3.0) |")


def test_overrides_reach_every_run_and_the_record(tmp_path, monkeypatch):
    mod = _bench()
    seen = []

    class Failed:
        returncode, stdout, stderr = 1, "", "stopped here"

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return Failed()

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    try:
        mod.run_one("sokoban_smol", 2, 60.0, tmp_path, ["model.dtype=bfloat16"])
    except RuntimeError as err:
        assert "sokoban_smol seed 2 failed" in str(err) and "stopped here" in str(err)
    else:
        raise AssertionError("a failed run must raise")
    cmd = seen[0]
    assert cmd[cmd.index("model.dtype=bfloat16") - 1] == "--set"
    assert cmd[cmd.index("seed=2") - 1] == "--set"
    args = mod.argparse.Namespace(
        budget=60.0, jobs=3, seeds=[0], presets=["sokoban_smol"],
        record=mod.RECORD, set=["model.dtype=bfloat16"], title=mod.TITLE,
    )  # fmt: skip
    assert "--set model.dtype=bfloat16`" in mod.record([], args, "3 run(s) at once")


def test_the_record_states_the_threads_of_the_runs_configs(tmp_path):
    mod = _bench()
    runs = []
    for name, threads in [("a", 1), ("b", None), ("c", 1)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(f"train: {{threads: {threads or 'null'}}}\n")
        runs.append({"run": str(tmp_path / name)})
    assert mod.threads_of([runs[0], runs[2]]) == "one thread per run"
    assert mod.threads_of([runs[1]]) == "every core per run (train.threads null)"
    assert mod.threads_of(runs) == "train.threads 1, null per run (null: every core)"
    assert mod.threads_of([]) == "no runs"


def test_task_blind_shares_are_read_where_logged(tmp_path):
    run = tmp_path / "sokoban_smol-s0" / "sokoban_smol-s0-20261205"
    run.mkdir(parents=True)
    evals = [{"eval/success": 0.0, "eval/format_error_rate": 0.0}] * 2
    summary = {"iterations": 4, "episodes": 64, "train_seconds": 9.0, "evals": evals}
    (run / "summary.json").write_text(json.dumps(summary))
    rows = [{**_row(i + 1, 0.0, 1.0, 1.0), "rollout/task_blind": b}
            for i, b in enumerate([0.9, 0.6, 0.3, 0.0])]  # fmt: skip
    rows[3]["curriculum/level"] = 2.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _bench().summarize(run.parent, "sokoban_smol", 0, 1.0, 1.0)
    assert (r["task_blind_first3"], r["task_blind_last3"]) == (0.6, 0.3)  # plain means
    assert r["curriculum_level_last"] == 2.0
    assert _bench().spread([0.5, None]) == "n/a"  # a run from before the metric


def test_pass_at_k_levels_lists_levels_and_counts_mixed_groups():
    mod = load_bench("real/pass_at_k_levels.py", "pass_at_k_levels")
    # tasks with 0, 1 and 4 successes of 4: pass@1 = (0 + 1/4 + 1) / 3, pass@2 = (0 + 1/2 +
    # 1) / 3; only the middle group is mixed
    stats = mod.group_stats([[False] * 4, [True, False, False, False], [True] * 4], [1, 2])
    assert stats == {"pass@1": 1.25 / 3, "pass@2": 1.5 / 3, "mixed": 1 / 3}
    from cairn.train.schema import Config

    def config(levels: list[dict], held_out: dict | None = None) -> Config:
        return Config.model_validate({
            "env": {"name": "search_qa", "options": {"hops": [1, 2], "kb_size": 12}},
            "curriculum": {"name": "success_rate", "options": {"levels": levels}},
            "eval": {"env_options": held_out or {}},
        })  # fmt: skip

    assert [o for _, o in mod.levels(config([{"hops": 1}, {}]))] == [
        {"hops": 1, "kb_size": 12},
        {"hops": [1, 2], "kb_size": 12},  # the last level is the held-out one: not repeated
    ]
    only = [("held-out (env.options)", {"hops": [1, 2], "kb_size": 12})]
    assert mod.levels(config([])) == only
    # eval.env_options (a test split) hold at every level measured on held-out seeds
    tested = mod.levels(config([{"hops": 1}], {"kb_size": 6}))
    assert [o for _, o in tested] == [{"hops": 1, "kb_size": 6}, {"hops": [1, 2], "kb_size": 6}]
