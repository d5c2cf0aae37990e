"""ScienceWorld env: gold path, failure, invalid input, replay snapshots, seeds, options, close.

One JVM serves the module (the ``env`` fixture and every env with its options share it);
tests reset it to the state they need.
"""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest

pytest.importorskip("scienceworld", reason="scienceworld env needs the 'scienceworld' extra")
if shutil.which("java") is None:
    pytest.skip("scienceworld needs a Java runtime (java not on PATH)", allow_module_level=True)

from cairn.envs import make
from cairn.envs._jvm import JvmDied
from cairn.envs.base import ReplaySnapshot
from cairn.envs.scienceworld import TASKS, ScienceWorld, resolve_task

TASK = "find-living-thing"  # short gold paths (10-12 moves), quick to load


def java_children() -> set[int]:
    """Pids of java processes whose parent is this test process."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"java" in cmd:
            pids.add(int(entry))
    return pids


@pytest.fixture(scope="module")
def env():
    sw = ScienceWorld(task=TASK, variations=[0, 1])
    yield sw
    sw.close()


def run(env: ScienceWorld, actions: list[str]) -> list[tuple]:
    """(obs, reward, terminated, truncated, valid) of each step, stopping at the end."""
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append((obs, reward, term, trunc, info["valid"]))
        if term or trunc:
            break
    return out


def world(env: ScienceWorld) -> tuple:
    """What the agent could observe without acting: room, inventory, score, moves."""
    server = env._server()
    return (
        server.freeActionLook(),
        server.freeActionInventory(),
        server.getScore(),
        (server.getNumMoves()),
    )


# -- options (no JVM needed) -----------------------------------------------------------------
def test_task_names_indices_and_paper_ids_resolve_to_one_name():
    # the package numbers "Matter: boiling" as task 1-1 and lists it first
    assert resolve_task("boil") == resolve_task(0) == resolve_task("1-1") == "boil"
    assert resolve_task("Matter Changes of State (Boiling)") == "boil"
    assert resolve_task(29) == TASKS[-1] and len(TASKS) == 30


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"task": "fly-to-the-moon"}, "unknown task"),
        ({"task": 30}, "task must be"),
        ({"task": 1.5}, "task must be"),
        ({"split": "valid"}, "split must be one of"),
        ({"variations": []}, "variations must be"),
        ({"variations": [0, -1]}, "variations"),
        ({"variations": "0,1"}, "variations must be"),
        ({"simplifications": "fastTravel"}, "simplifications must be one of"),
        ({"simplifications": 3}, "simplifications must be"),
        ({"task": "power-component", "simplifications": "noElectricalAction"}, "electrical"),
        ({"admissible": "yes"}, "admissible must be True or False"),
        ({"raw_score": 1}, "raw_score must be True or False"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        ScienceWorld(**options)


def test_registry_builds_it_and_rejects_unknown_options():
    assert isinstance(make("scienceworld", task="melt"), ScienceWorld)
    with pytest.raises(ValueError, match="no option 'level'"):
        make("scienceworld", level=3)


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        ScienceWorld().step("look around")


# -- episodes -----------------------------------------------------------------------------------
def test_gold_path_succeeds_and_rewards_sum_to_one(env):
    obs, info = env.reset(seed=0)
    assert env.variation == 0 and env.vocabulary() == []
    assert "living thing" in env.instruction and "hallway" in obs
    assert info == {
        "anchor": obs,
        "valid": True,
        "success": False,
        "admissible": None,
        "score": 0.0,
        "variation": 0,
        "steps": 0,
    }
    gold = env.gold_actions()
    steps = run(env, gold)
    # score 0 -> 100 points; normalised rewards are point deltas / 100, so they sum to 1
    assert sum(r for _, r, _, _, _ in steps) == pytest.approx(1.0)
    assert all(valid for *_, valid in steps)
    assert [t for _, _, t, _, _ in steps] == [False] * (len(gold) - 1) + [True]
    assert env.snapshot().actions == tuple(gold)
    with pytest.raises(RuntimeError, match="ended"):
        env.step("look around")


def test_focusing_on_the_wrong_thing_fails_and_ends_the_episode(env):
    env.reset(seed=0)
    _obs, reward, term, trunc, info = env.step("focus on air")
    # air is not alive: the task sets the score to -100 points, i.e. -1 normalised
    assert (reward, term, trunc, info["success"], info["score"]) == (-1.0, True, False, False, -1.0)


def test_unknown_input_is_invalid_and_changes_nothing(env):
    _obs0, _info0 = env.reset(seed=1)
    env.step("open door to hallway")
    before = world(env)
    anchor = env.step("look around")[4]["anchor"]
    for bad in ["xyzzy", "", "fly to the moon", "open the pod bay doors"]:
        obs, reward, term, trunc, info = env.step(bad)
        assert obs.startswith("No known action") and info["valid"] is False
        assert (reward, term, trunc, info["anchor"]) == (0.0, False, False, anchor)
        assert world(env) == before


def test_invalid_inputs_between_gold_moves_do_not_alter_the_trajectory(env):
    env.reset(seed=0)
    gold = env.gold_actions()
    clean = run(env, gold)
    env.reset(seed=0)
    noisy = []
    for action in gold:
        assert env.step("xyzzy")[4]["valid"] is False
        noisy += run(env, [action])
    assert noisy == clean


def test_ambiguous_input_asks_which_object_and_a_bad_answer_is_invalid(env):
    env.reset(seed=0)
    obs, _, _, _, info = env.step("look at door")  # the hallway has six doors
    assert obs.startswith("Ambiguous request") and info["valid"] is True
    obs, _, _, _, info = env.step("banana")  # not a number: the game cancels the question
    assert obs.startswith("Unknown action") and info["valid"] is False
    obs, _, _, _, info = env.step("look at door")
    obs, _, _, _, info = env.step("0")
    assert info["valid"] is True and "door" in obs


# -- seeds and snapshots --------------------------------------------------------------------------
def test_same_seed_same_state_and_seed_indexes_the_variation_pool(env):
    first = env.reset(seed=4)
    assert env.variation == 0  # pool (0, 1): seed 4 -> 4 % 2 = 0
    assert env.reset(seed=4) == first
    env.reset(seed=7)
    assert env.variation == 1
    assert env.task_variations() == (0, 1)


def test_restore_replays_to_the_same_observation_and_future_rewards(env):
    env.reset(seed=0)
    gold = env.gold_actions()
    head = run(env, gold[:6])
    snap = env.snapshot()
    tail = run(env, gold[6:])  # the episode ends; restore must bring back the middle state
    obs, info = env.restore(snap)
    assert isinstance(snap, ReplaySnapshot) and obs == head[-1][0] == info["anchor"]
    # variation 0 (deterministic JVM): doors and moves earn 25 points, focusing on the
    # blue jay 50 more, before it is picked up
    assert gold[5] == "focus on blue jay" and info["score"] == pytest.approx(0.75)
    assert run(env, gold[6:]) == tail


def test_restore_equals_replay_on_random_action_prefixes(env):
    rng = random.Random(0)
    env.reset(seed=1)
    vocab = [*env.gold_actions(), "xyzzy", "look around", "inventory"]
    for _ in range(2):
        env.reset(seed=1)
        prefix = [rng.choice(vocab) for _ in range(rng.randint(1, 5))]
        steps = run(env, prefix)
        if steps[-1][2]:
            continue
        snap, state = env.snapshot(), world(env)
        env.reset(seed=0)
        env.step("open door to greenhouse")
        obs, _ = env.restore(snap)
        assert world(env) == state and obs == steps[-1][0]


def test_reset_without_seed_draws_one_that_replays(env):
    obs, _ = env.reset()
    after = env.step("open door to greenhouse")[0]
    snap = env.snapshot()
    assert isinstance(snap.seed, int)
    assert env.reset(seed=snap.seed)[0] == obs
    assert env.restore(snap)[0] == after


def test_gold_actions_midway_leave_the_episode_where_it_was(env):
    env.reset(seed=1)
    env.step("open door to hallway")
    before = world(env)
    env._gold.clear()  # force the reload-and-replay path
    assert env.gold_actions()[0] == "open door to hallway"
    assert world(env) == before


def test_admissible_actions_are_sorted_contain_gold_and_leave_state_alone(env):
    env.reset(seed=0)
    gold = env.gold_actions()
    acts = env.admissible_actions()
    assert acts == sorted(set(acts)) and gold[0] in acts and "xyzzy" not in acts
    env.admissible = True
    try:
        acts = env.reset(seed=0)[1]["admissible"]
        with_lists = []
        for action in gold[:3]:
            assert action in acts  # each gold move is admissible where it is taken
            obs, reward, term, trunc, info = env.step(action)
            with_lists.append((obs, reward, term, trunc, info["valid"]))
            acts = info["admissible"]
    finally:
        env.admissible = False
    env.reset(seed=0)
    assert run(env, gold[:3]) == with_lists


def test_raw_score_gives_points(env):
    env.raw_score = True
    try:
        env.reset(seed=0)
        _, reward, _, _, info = env.step("open door to greenhouse")
    finally:
        env.raw_score = False
    # the first gold move of variation 0 earns 8 points (0.08 normalised, see the gold test)
    assert (reward, info["score"]) == (8.0, 8)


# -- lifetime -----------------------------------------------------------------------------------
def test_truncation_and_close_leave_no_java_process():
    before = java_children()
    with ScienceWorld(task=TASK, variations=[0], max_steps=2, share_jvm=False) as sw:
        sw.reset(seed=0)
        assert len(java_children() - before) == 1  # its own JVM
        assert sw.step("look around")[3] is False
        _, _, term, trunc, info = sw.step("xyzzy")  # invalid steps count toward the budget
        assert (term, trunc, info["success"]) == (False, True, False)
    assert java_children() == before
    sw.close()  # idempotent


def test_envs_share_one_jvm_with_independent_worlds_and_stop_it_last():
    # Options unlike the module fixture's (a heap cap): these two envs start their own JVM.
    opts = {"task": TASK, "variations": [0, 1], "jvm_heap_mb": 512}
    before = java_children()
    a, b = ScienceWorld(**opts), ScienceWorld(**opts)
    private = ScienceWorld(**opts, share_jvm=False)
    a.reset(seed=0), b.reset(seed=1), private.reset(seed=0)
    new = java_children() - before
    assert len(new) == 2 and a._gateway is b._gateway is not private._gateway
    with open(f"/proc/{a._gateway.java_process.pid}/cmdline", "rb") as f:
        assert b"-Xmx512m" in f.read().split(b"\0")
    gold_a, gold_b = a.gold_actions()[:6], b.gold_actions()[:6]
    interleaved = []
    for act_a, act_b in zip(gold_a, gold_b, strict=True):  # steps of b between a's steps
        interleaved.append(a.step(act_a)[0])
        b.step(act_b)
    assert interleaved == [private.step(act)[0] for act in gold_a]  # b changed nothing of a
    a.close()
    assert java_children() - before == new  # b still uses the shared JVM
    b.close(), private.close()
    assert java_children() == before


def test_a_dead_shared_jvm_is_replaced_for_the_next_env():
    opts = {"task": TASK, "variations": [0], "jvm_heap_mb": 384}
    first = ScienceWorld(**opts)
    first.reset(seed=0)
    process = first._gateway.java_process
    process.kill()
    process.wait()
    second = ScienceWorld(**opts)
    second.reset(seed=0)  # a fresh JVM, not the dead one
    assert second._gateway is not first._gateway and "living" in second.instruction
    first.close(), second.close()


def test_a_killed_shared_jvm_costs_one_episode_and_the_other_envs_replay_theirs():
    opts = {"task": TASK, "variations": [0, 1], "jvm_heap_mb": 320}  # a JVM of their own
    before = java_children()
    a, b = ScienceWorld(**opts), ScienceWorld(**opts)
    a.reset(seed=0), b.reset(seed=1)
    moves = b.gold_actions()[:3]
    run(b, moves[:2])
    dead = a._gateway.java_process
    dead.kill()
    dead.wait()
    with pytest.raises(JvmDied, match=r"exited with code -9 before step\(\); this episode is lost"):
        a.step("look around")
    after_kill = b.step(moves[2])  # b moved to a fresh JVM and replayed its two moves
    ref = ScienceWorld(**opts)
    ref.reset(seed=1)
    assert run(ref, moves[:2]) and ref.step(moves[2])[:4] == after_kill[:4]
    assert a.reset(seed=0)[0] and a._gateway is b._gateway is ref._gateway
    assert len(java_children() - before) == 1  # the new JVM; the dead one is gone
    a.close(), b.close(), ref.close()
    assert java_children() == before


@pytest.mark.parametrize("heap", [0, 10, "1g", True])
def test_a_bad_heap_cap_names_the_option(heap):
    with pytest.raises(ValueError, match="jvm_heap_mb must be None or an int >= 64"):
        ScienceWorld(task=TASK, jvm_heap_mb=heap)


def test_same_named_objects_are_listed_and_picked_the_same_way_after_every_load(env):
    # variation 1 starts in the art studio with three wood cups (red, yellow, blue paint);
    # with the JVM's default random identity hashes their order and the cup that answer
    # "0" picks change from load to load
    outcomes = set()
    for _ in range(4):
        obs, _ = env.reset(seed=1)
        question = env.step("look at wood cup")[0]
        outcomes.add((obs, question, env.step("0")[0], world(env)))
    assert len(outcomes) == 1
    ((obs, question, answer, _),) = outcomes
    assert obs.count("a wood cup") == 3 and question.count("look at wood cup") == 3
    assert answer.startswith("a wood cup (containing")


@pytest.mark.slow
def test_splits_are_the_packages_disjoint_sets_and_bad_variations_fail_at_reset():
    pools = {}
    for split in ("train", "dev", "test"):
        with ScienceWorld(task=TASK, split=split) as sw:
            pools[split] = set(sw.task_variations())
    # find-living-thing has 300 variations, split about 50/25/25 % by the package
    assert len(pools["train"]) + len(pools["dev"]) + len(pools["test"]) == 300
    assert not (pools["train"] & pools["dev"]) and not (pools["dev"] & pools["test"])
    with ScienceWorld(task=TASK, variations=[0, 300]) as sw, pytest.raises(ValueError) as err:
        sw.reset(seed=0)
    assert "variations [300] out of range" in str(err.value) and "0-299" in str(err.value)


@pytest.mark.slow
def test_fast_path_is_much_faster_than_listing_valid_actions_every_step(env):
    def steps_per_second(n: int) -> float:
        env.reset(seed=0)
        start = time.perf_counter()
        for _ in range(n):
            env.step("look around")
        return n / (time.perf_counter() - start)

    fast = steps_per_second(100)
    env.admissible = True  # what the package's own step does after every move
    try:
        slow = steps_per_second(10)
    finally:
        env.admissible = False
    print(f"scienceworld: {fast:.0f} steps/s fast path, {slow:.1f} steps/s listing actions")
    assert fast > 5 * slow


def test_gold_action_is_the_next_gold_move_on_the_gold_path(env):
    env.reset(seed=0)
    gold = env.gold_actions()
    assert env.gold_action() == gold[0]
    env.step(gold[0])
    assert env.gold_action() == gold[1]
    env.step("xyzzy")  # off the path
    assert env.gold_action() is None
