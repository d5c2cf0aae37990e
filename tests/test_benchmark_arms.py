"""A comparison arm under benchmarks/real/ is its preset with only the compared keys changed,
so a record that names the arm compares what it says it compares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn.train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
ARMS = ROOT / "benchmarks" / "real"

#: arm file -> (the preset it varies, the section it compares, the sections it may change).
VARIED = {
    "sokoban_smol_grpo.yaml": ("sokoban_smol", "advantage", {"name", "advantage"}),
    "twx_smol_grpo.yaml": ("twx_smol", "advantage", {"name", "advantage"}),
    "search_qa_smol_grpo.yaml": ("search_qa_smol", "advantage", {"name", "advantage"}),
    # IGPO's estimator reads the turn rewards of its info_gain reward (rewards)
    "search_qa_smol_igpo.yaml": ("search_qa_smol", "advantage", {"name", "advantage", "rewards"}),
    # no demonstrations, so no shaping of their off-policy loss either (loss)
    "search_qa_smol_nodemos.yaml": (
        "search_qa_smol",
        "exploration",
        {"name", "exploration", "loss"},
    ),
}


def changed_sections(arm: Path, preset: str) -> set[str]:
    """The top-level config sections in which ``arm`` differs from ``preset``."""
    a = load_config(arm, check=False).model_dump()
    b = load_config(preset, check=False).model_dump()
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def test_every_arm_file_is_listed():
    assert {p.name for p in ARMS.glob("*.yaml")} == set(VARIED)


@pytest.mark.parametrize("arm", sorted(VARIED))
def test_an_arm_differs_from_its_preset_in_the_compared_sections_only(arm):
    preset, compared, allowed = VARIED[arm]
    changed = changed_sections(ARMS / arm, preset)
    assert compared in changed
    assert changed <= allowed, f"{arm} also changes {sorted(changed - allowed)}"


def test_the_check_sees_a_change_outside_the_compared_sections(tmp_path):
    # whatever the preset's lr, the arm's own is changed
    text = re.sub(r"\blr: [0-9.e-]+", "lr: 0.0123", (ARMS / "twx_smol_grpo.yaml").read_text())
    (tmp_path / "arm.yaml").write_text(text)
    assert "optim" in changed_sections(tmp_path / "arm.yaml", "twx_smol")
