"""Words a newcomer reads: train --help explains --set, the common keys and the progress
line; misspelled presets and keys get a "did you mean"; a pretrained model's config shows
no tiny-model keys; messages keep their brackets."""

from __future__ import annotations

import pytest
import yaml

from cairn.cli import main
from cairn.train.config import load_config
from cairn.train.rollout_sections import TINY_MODEL_KEYS


def test_train_help_names_the_common_keys_and_the_progress_abbreviations(capsys):
    from cairn.train.runlog import _SHOWN

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for needle in ("--set KEY=VALUE", "cairn config --keys", "model.path", "env.name", "imports"):
        assert needle in text, needle
    legend = text.split("the progress line")[1]
    for _, short, _ in _SHOWN:  # every abbreviation the live line prints is explained
        assert f"  {short}  " in legend, short
    assert "eval" in legend and "ep " in legend and "it " in legend


def test_a_misspelled_preset_gets_a_did_you_mean(capsys):
    assert main(["config", "sokoban_grop"]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "did you mean 'sokoban_grpo'?" in out


def test_a_misspelled_key_gets_a_did_you_mean(capsys):
    assert main(["config", "--set", "rollout.grup_size=4"]) == 2
    assert "did you mean 'group_size'?" in capsys.readouterr().out
    assert main(["config", "--set", "env.nmae=sokoban"]) == 2
    assert "did you mean 'name'?" in capsys.readouterr().out


def test_a_misspelled_env_gets_a_did_you_mean():
    with pytest.raises(ValueError, match="did you mean 'sokoban'"):
        load_config(None, ["env.name=sokobn"])


def test_a_pretrained_preset_shows_no_tiny_model_keys(capsys):
    assert main(["config", "countdown_smol"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert not set(TINY_MODEL_KEYS) & set(shown["model"]), shown["model"]
    # the printed config still loads back to the same config
    assert load_config(None, [], check=False).model_validate(shown) == load_config(
        "countdown_smol", check=False
    )
    assert main(["config", "sokoban_grpo"]) == 0  # the tiny model's own keys stay
    assert set(TINY_MODEL_KEYS) <= set(yaml.safe_load(capsys.readouterr().out)["model"])


def test_an_error_keeps_its_brackets(capsys):
    assert main(["config", "--set", "rollout.stop=[a"]) == 2
    assert "quote a string, e.g. key='\"[a\"'" in capsys.readouterr().out
