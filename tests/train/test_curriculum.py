"""The automatic curriculum (cairn.train.curriculum): its rule on a worked example, its
config checks, and a tiny-model run whose training difficulty moves while the held-out
evaluation stays at env.options, resumed exactly."""

from __future__ import annotations

import math

import pytest

from cairn._errors import ConfigError
from cairn.train.config import load_config
from cairn.train.curriculum import CURRICULA, SuccessRateCurriculum
from cairn.train.runlog import read_metrics
from cairn.train.trainer import Trainer


def test_worked_example_of_the_module_docstring():
    c = SuccessRateCurriculum([{"a": 1}, {"a": 2}, {"a": 3}], raise_at=0.5, lower_at=0.25, window=4)
    assert c.observe([True, False, False]) is False and c.level == 0  # window not full
    assert c.last_rate == pytest.approx(1 / 3)
    assert c.observe([True, True]) is True and c.level == 1  # [0, 0, 1, 1]: 0.5 >= 0.5
    assert c.last_rate == 0.5 and list(c.recent) == []  # the window starts again
    assert c.observe([False, False, False, True]) is True and c.level == 0  # 0.25 <= 0.25
    assert c.env_options({"a": 0, "b": 1}) == {"a": 1, "b": 1}
    assert c.env_options({"a": 0}, level=2) == {"a": 3}


def test_the_top_level_stays_and_lower_at_is_optional():
    c = SuccessRateCurriculum([{}, {}], raise_at=0.5, window=2)
    assert c.observe([True, True]) and c.level == 1
    assert not c.observe([True, True]) and c.level == 1  # no level above
    assert not c.observe([False, False]) and c.level == 1  # no lower_at: never down
    assert c.metrics() == {"curriculum/level": 1.0, "curriculum/success": 0.0}
    assert math.isnan(SuccessRateCurriculum([{}]).metrics()["curriculum/success"])


def test_state_round_trip_and_a_level_this_run_lacks():
    c = SuccessRateCurriculum([{}, {}, {}], window=8)
    c.observe([True, False, True])
    c.level = 2
    d = SuccessRateCurriculum([{}, {}, {}], window=8)
    d.load_state_dict(c.state_dict())
    assert d.level == 2 and list(d.recent) == [True, False, True]
    with pytest.raises(ValueError, match="level 5 is not one of this run's levels"):
        d.load_state_dict({"level": 5, "recent": []})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"levels": []}, "non-empty list"),
        ({"levels": [3]}, r"levels\[0\] must be a dict"),
        ({"levels": [{}], "start": 1}, "start must be in 0..0"),
        ({"levels": [{}], "raise_at": 0}, "raise_at must be in"),
        ({"levels": [{}], "raise_at": 0.5, "lower_at": 0.5}, "lower_at must be in"),
        ({"levels": [{}], "window": 0}, "window must be an int >= 1"),
        ({"levels": [{}], "speed": 2}, "no option 'speed'"),
    ],
)
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(ValueError, match=message):
        CURRICULA.make("success_rate", **options)


def test_config_checks_name_and_every_levels_env_options(tmp_path):
    with pytest.raises(ConfigError, match="unknown curriculum 'ladder'; available: success_rate"):
        load_config(None, ["curriculum.name=ladder", "curriculum.options={levels: [{}]}"])
    with pytest.raises(ConfigError, match=r"curriculum level 1: env 'sokoban'.*max_solution"):
        load_config(
            None,
            [
                "curriculum.name=success_rate",
                "curriculum.options={levels: [{}, {max_solution: 99}]}",
            ],
        )
    with pytest.raises(ConfigError, match=r"curriculum\.options given without curriculum\.name"):
        load_config(None, ["curriculum.options={levels: [{}]}"])
    assert load_config(None, []).curriculum.name is None  # off by default


SMALL = [
    "rollout.groups=2",
    "rollout.group_size=4",
    "optim.minibatch_size=32",
    "optim.epochs=1",
    "eval.episodes=4",
    "eval.every=0",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "train.iterations=3",
    "checkpoint.every=1",
    "curriculum.name=success_rate",
    # start at the top and step down after every iteration (no window is all successes)
    "curriculum.options={levels: [{max_solution: 1}, {max_solution: 2}, {}], start: 2, "
    "raise_at: 1.0, lower_at: 0.99, window: 8}",
]


def test_a_run_climbs_down_trains_at_the_level_and_resumes_exactly(tmp_path, run_stopped):
    cfg = load_config(None, [*SMALL, f"out_dir={tmp_path}"])
    full, part = tmp_path / "full", tmp_path / "part"
    trainer = Trainer(cfg, full)
    trainer.run()
    rows = read_metrics(full)
    assert [r["curriculum/level"] for r in rows] == [2.0, 1.0, 0.0]
    assert trainer.curriculum.level == 0
    (train_env,) = trainer.train_envs.take(1)
    (eval_env,) = trainer.eval_envs.take(1)
    assert train_env.max_solution == 1 and eval_env.max_solution == 5  # eval: env.options
    run_stopped(cfg, part, 2)
    resumed = Trainer(cfg, part, resume=True)
    assert resumed.curriculum.level == 0  # lowered after iteration 2, saved with it
    (env,) = resumed.train_envs.take(1)
    assert env.max_solution == 1
    resumed.run()
    again = read_metrics(part)
    # equal apart from timings and the evaluation the stopped run did as it stopped
    strip = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "eval/"))}  # noqa: E731
    assert [strip(r) for r in again] == [strip(r) for r in rows]


def test_task_blind_share_counts_the_episodes_the_env_judged():
    from cairn.data.episode import Episode
    from cairn.train.summary import episode_stats, task_blind_share

    judged = [Episode(id=i, group=0, task=0, meta={"task_blind": b}) for i, b in enumerate([1, 0])]
    silent = Episode(id=2, group=0, task=0)  # its env does not judge: left out
    assert task_blind_share([*judged, silent]) == 0.5
    assert task_blind_share([silent]) is None
    assert episode_stats([*judged, silent], "rollout")["rollout/task_blind"] == 0.5
    assert "rollout/task_blind" not in episode_stats([silent], "rollout")


@pytest.mark.parametrize("preset", ["countdown_smol", "sokoban_smol", "search_qa_smol"])
def test_real_presets_climb_to_a_fixed_held_out_difficulty(preset):
    """Each real-model preset trains on a curriculum whose last level is its held-out
    env.options, and evaluates at least 64 held-out instances (one is < 2 points)."""
    from types import SimpleNamespace

    import yaml

    from cairn.train.curriculum import check_curriculum
    from cairn.train.presets import preset_text

    raw = yaml.safe_load(preset_text(preset))
    assert raw["eval"]["episodes"] >= 64
    assert raw["curriculum"]["name"] == "success_rate"
    levels = raw["curriculum"]["options"]["levels"]
    assert len(levels) >= 2 and levels[-1] == {}  # the top level is the held-out difficulty
    cfg = SimpleNamespace(
        env=SimpleNamespace(name=raw["env"]["name"], options=raw["env"]["options"]),
        curriculum=SimpleNamespace(**raw["curriculum"]),
    )
    check_curriculum(cfg)  # every level's env options are valid
