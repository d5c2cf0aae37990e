"""benchmarks/speed/trl_compare.py without TRL or a model: its arithmetic (ratios paired by
repeat, spreads, per-step rates), its settings (arguments, cairn overrides that validate,
the venv commands), TRL's reward (cairn's countdown reward), and a dry run that makes
nothing."""

from __future__ import annotations

import pytest
from benchload import load_bench


def _bench():
    return load_bench("speed/trl_compare.py", "trl_compare_bench")


def _row(rep: int, arm: str, step: float, gen: float, rss: float) -> dict:
    return {
        "repeat": rep, "arm": arm, "step_s": step, "gen_s": gen, "update_s": step - gen,
        "gen_tok_s": 300 / gen, "train_tok_s": 300 / (step - gen), "peak_rss_mb": rss,
        "steps_peak_mb": rss, "gen_tokens": 300, "reward": 0.1,
    }  # fmt: skip


def test_ratios_pair_each_cairn_process_with_the_trl_process_of_its_repeat():
    rows = [
        _row(0, "cairn", 40.0, 10.0, 3000.0), _row(0, "trl", 100.0, 20.0, 6000.0),
        _row(1, "cairn", 60.0, 12.0, 3000.0), _row(1, "trl", 100.0, 20.0, 5000.0),
        _row(2, "cairn", 90.0, 18.0, 3000.0), _row(2, "trl", 100.0, 20.0, 4000.0),
        _row(3, "cairn", 2.0, 1.0, 1.0),  # no TRL process in repeat 3: left out
    ]  # fmt: skip
    ratios = _bench().pair_ratios(rows)
    assert [r["step_s"] for r in ratios] == [0.4, 0.6, 0.9]
    assert [r["gen_s"] for r in ratios] == [0.5, 0.6, 0.9]
    assert [r["peak_rss_mb"] for r in ratios] == [0.5, 0.6, 0.75]
    # update 30/80, 48/80, 72/80; generated tokens/s is the inverse of generation time.
    assert [round(r["update_s"], 4) for r in ratios] == [0.375, 0.6, 0.9]
    assert [round(r["gen_tok_s"], 4) for r in ratios] == [2.0, 1.6667, 1.1111]


def test_table_gives_median_and_range_of_the_ratios_and_the_checks():
    rows = [
        _row(0, "cairn", 40.0, 10.0, 3000.0), _row(0, "trl", 100.0, 20.0, 6000.0),
        _row(1, "cairn", 60.0, 12.0, 3000.0), _row(1, "trl", 100.0, 20.0, 5000.0),
        _row(2, "cairn", 90.0, 18.0, 3000.0), _row(2, "trl", 100.0, 20.0, 4000.0),
    ]  # fmt: skip
    text = _bench().table(rows)
    # step ratios 0.4, 0.6, 0.9: median 0.6 > 0.5 fails; cairn's median step 60, TRL's 100.
    assert "| whole step s | 0.60x (0.40-0.90) | 60.00 | 100.00 | FAIL (<= 0.5) |" in text
    # generation 0.5, 0.6, 0.9: median 0.6 <= 0.6 passes.
    assert "| generation s | 0.60x (0.50-0.90) | 12.00 | 20.00 | pass (<= 0.6) |" in text
    assert "| peak RSS MB (process) | 0.60x (0.50-0.75) | 3000.00 | 5000.00 | pass" in text
    assert "| update s (step - generation) | 0.60x (0.38-0.90) | 48.00 | 80.00 | - |" in text


def test_table_without_a_complete_pair_is_an_error():
    with pytest.raises(ValueError, match="no repeat has both arms"):
        _bench().table([_row(0, "cairn", 1.0, 0.5, 1.0)])


def test_a_process_row_is_the_median_of_its_steps_with_update_as_step_minus_generation():
    steps = [
        {"gen_s": 10.0, "step_s": 50.0, "gen_tokens": 300, "train_tokens": 280, "reward": 0.1},
        {"gen_s": 20.0, "step_s": 60.0, "gen_tokens": 200, "train_tokens": 200, "reward": 0.3},
        {"gen_s": 12.0, "step_s": 40.0, "gen_tokens": 240, "train_tokens": 210, "reward": 0.2},
    ]
    row = _bench().summarize_steps(steps, {"peak_rss_mb": 900.0, "steps_peak_mb": 800.0})
    assert row["gen_s"] == 12.0 and row["step_s"] == 50.0 and row["reward"] == 0.2
    assert row["update_s"] == 40.0  # median of 40, 40, 28
    assert row["gen_tok_s"] == 20.0  # median of 30, 10, 20 tokens/s
    assert row["train_tok_s"] == 7.0  # median of 280/40, 200/40, 210/28 = 7, 5, 7.5
    assert row["peak_rss_mb"] == 900.0 and row["steps_peak_mb"] == 800.0


def test_spread_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        _bench().spread([])


def test_arguments_have_their_documented_defaults_and_reject_bad_values(capsys):
    bench = _bench()
    args = bench.parse_args([])
    assert (args.groups, args.group_size, args.new_tokens, args.mode) == (2, 8, 32, "lora")
    assert bench.parse_args(["--new-tokens", "16", "--mode", "full"]).new_tokens == 16
    for bad in (["--new-tokens", "0"], ["--steps", "0"], ["--budget-min", "0"], ["--arm", "trl"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
    assert "--steps must be >= 1, got 0" in capsys.readouterr().err


def test_cairn_overrides_make_a_valid_config_of_the_same_work():
    from cairn.train.config import load_config

    bench = _bench()
    args = bench.parse_args(["--new-tokens", "24", "--mode", "full", "--steps", "2"])
    cfg = load_config(bench.PRESET, bench.cairn_overrides(args, "runs/x"))
    assert (cfg.rollout.groups, cfg.rollout.group_size, cfg.rollout.max_new_tokens) == (2, 8, 24)
    assert (cfg.optim.minibatch_size, cfg.optim.epochs, cfg.loss.kl_coef) == (16, 1, 0.0)
    assert cfg.train.iterations == 3 and cfg.train.threads == 1 and cfg.model.lora is None
    trl = bench.trl_config(args, "runs/x")
    assert trl["per_device_train_batch_size"] == 16 and trl["num_generations"] == 8
    assert trl["max_completion_length"] == 24 and trl["beta"] == 0.0 and trl["max_steps"] == 3


def test_the_venv_commands_pin_trl_and_the_local_versions(tmp_path):
    bench = _bench()
    versions = {name: f"1.{i}" for i, name in enumerate(bench.PINNED)}
    make, install = bench.install_commands(tmp_path / "v", versions)
    assert make[1:] == ["-m", "venv", str(tmp_path / "v")]
    assert install[0] == str(tmp_path / "v" / "bin" / "python")
    assert "trl==1.16.0" in install and "torch==1.0" in install and "gguf==1.5" in install


def test_trl_reward_is_cairns_countdown_reward():
    from cairn.envs.countdown import Countdown

    bench = _bench()
    options = {"count": [3, 4], "number_range": [1, 20], "target_range": [1, 100],
               "format_reward": 0.1, "render": "text"}  # fmt: skip
    agent = {"action_pattern": None, "action_format": "tagged", "invalid_penalty": 0.5}
    reward = bench.countdown_reward({"env_options": options, "agent": agent})
    env = Countdown(**options)
    env.reset(seed=7)
    gold, numbers = env.solution(), env.reset(seed=7)[1]["numbers"]
    wrong = " + ".join(str(n) for n in numbers[:2])  # valid over the numbers, misses
    texts = [f"<action>{gold}</action>", f"<action>{wrong}</action>", "no tag", "<action>99"]
    # right: 1; a valid miss: the format reward 0.1; no action: 0 - the invalid penalty.
    assert reward(texts, [7, 7, 7, 7]) == [1.0, 0.1, -0.5, -0.5]


def test_dry_run_prints_the_plan_and_makes_nothing(tmp_path, capsys):
    venv = tmp_path / "venv"
    out = tmp_path / "out"
    argv = ["--dry-run", "--venv", str(venv), "--out", str(out), "--new-tokens", "16"]
    assert _bench().main(argv) == 0
    text = capsys.readouterr().out
    assert "16 new tokens" in text and "to be made" in text and "trl==1.16.0" in text
    assert "rollout.max_new_tokens=16" in text and "max_completion_length=16" in text
    assert not venv.exists() and not out.exists()


def test_record_names_the_work_the_load_and_the_prompts():
    bench = _bench()
    rows = [_row(0, "cairn", 40.0, 10.0, 3000.0), _row(0, "trl", 100.0, 20.0, 6000.0)]
    meta = {"argv": ["--steps", "1"], "load_before": "1.00 2.00 3.00",
            "load_after": "4.00 5.00 6.00", "minutes": 2.5, "roundtrip": True,
            "prompt_tokens": [250, 262]}  # fmt: skip
    text = bench.record(rows, bench.parse_args(["--steps", "1"]), meta)
    assert "`python benchmarks/speed/trl_compare.py --steps 1`" in text
    assert "1.00 2.00 3.00 before and 4.00 5.00 6.00 after, over 2.5 min" in text
    assert "prompt tokens 256 (250-262)" in text and "1 alternating pairs" in text
    assert "| 0 | trl | 100.00 | 20.00 | 80.00 | 300 | 6000 | 0.100 |" in text
