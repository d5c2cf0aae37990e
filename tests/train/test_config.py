"""Config loading: defaults, presets, overrides and the errors a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn._errors import ConfigError
from cairn.train.config import load_config
from cairn.train.configfile import apply_overrides
from cairn.train.schema import Config, describe

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_defaults_are_the_gigpo_preset():
    preset = load_config(CONFIGS / "sokoban_gigpo.yaml")
    assert preset == Config()


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_preset_loads(path):
    cfg = load_config(path)
    assert cfg.name == path.stem


def test_overrides_parse_yaml_values_and_nest():
    cfg = load_config(
        None, ["rollout.group_size=4", "env.options.max_steps=20", "loss.dual_clip=3"]
    )
    assert cfg.rollout.group_size == 4
    assert cfg.env.options["max_steps"] == 20
    assert cfg.loss.dual_clip == 3.0


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("rollout.grup_size=4", ["rollout.grup_size", "group_size"]),
        ("rollout.group_size=0", ["rollout.group_size", "0", "greater than 0"]),
        ("loss.agg=sum", ["loss.agg", "'sum'", "token-mean"]),
        ("advantage.name=nope", ["'nope'", "gigpo"]),
        ("advantage.options.gamma=2", ["gamma", "2"]),
        ("advantage.options.gama=0.9", ["gama", "gamma"]),
        ("env.name=chess", ["'chess'", "sokoban"]),
        ("env.options.colour=red", ["colour", "max_steps"]),
        ("agent.action_pattern=(a)(b)", ["action_pattern", "one group"]),
        ("train.threads=-1", ["train.threads", "-1"]),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_allowed(override, needles):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["rollout.group_size"])
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"seed": 1}, ["seed.x=1"])


def test_every_key_has_help():
    rows = describe()
    assert len(rows) > 40
    assert all(help_ for key, _, help_ in rows if not key.endswith("options")), [
        key for key, _, h in rows if not h
    ]


@pytest.mark.parametrize("stop", ["</action>", "</", ">"])
def test_a_stop_inside_the_closing_tag_is_refused_for_tagged_actions(stop):
    # The text ends before the stop, so "<action>up</action>" would reach the parser as
    # "<action>up": every tagged action a format error.
    with pytest.raises(ConfigError, match=r"rollout\.stop .* cuts every completion"):
        load_config(None, ["agent.action_format=tagged", f"rollout.stop=['{stop}']"])


def test_stops_that_keep_the_closing_tag_are_accepted():
    load_config(None, ["agent.action_format=tagged", "rollout.stop=['</action>\\n\\n', 'Obs:']"])
    load_config(None, ["agent.action_format=tool_call", "rollout.stop=['</tool_call>']"])
    # A pattern of one's own decides what the text must hold.
    load_config(None, ["agent.action_format=tagged", "agent.action_pattern=<action>(\\w+)",
                       "rollout.stop=['</action>']"])  # fmt: skip


# -- env options default to the chosen env's own --------------------------------------------
def test_another_env_named_without_options_gets_its_own_defaults():
    # not sokoban's demo options, which countdown refuses ("has no option 'size'")
    cfg = load_config(None, ["env.name=countdown"])
    assert cfg.env.options == {}
    assert load_config(None, ["env.name=countdown", "env.options.max_steps=3"]).env.options == {
        "max_steps": 3
    }


def test_the_demo_config_is_the_demo_env_and_hashes_to_a_known_value():
    from cairn.train.checkpoint.runconfig import config_sha256
    from cairn.train.rollout_sections import DEMO_ENV

    sokoban = load_config(None, ["env.name=sokoban"])
    assert Config().env.options == DEMO_ENV[1] == sokoban.env.options
    assert Config().model_dump()["imports"] == []  # every key is written, defaults too
    # the sha256 of the resolved demo config (canonical JSON, sorted keys), which a
    # checkpoint records: a change to any key or default of the schema changes it
    assert config_sha256(Config()) == (
        "7b4e808d966b9c6bf9567de01f3b382a3a9b616894a7d602e90c3ff8edebceab"
    )
    with_imports = Config(imports=["json"]).model_dump()
    assert with_imports["imports"] == ["json"]


def test_imports_must_be_module_names():
    with pytest.raises(ConfigError, match=r"imports\.0|imports = .*not a module name"):
        load_config(None, ["imports=['my pkg']"], check=False)
