"""Countdown env: exact safe evaluation, generated instances, gold path, tries, snapshots."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from cairn.envs import make
from cairn.envs.base import TextEnv
from cairn.envs.countdown import Countdown
from cairn.envs.countdown_math import (
    evaluate_expression,
    generate_countdown,
    is_trivial,
    key_steps,
    read_answer,
)
from cairn.rewards.step_grpo import key_step_matches


def test_worked_examples_of_exact_evaluation():
    # (25 - 3) * 7 + 50 = 22 * 7 + 50 = 154 + 50 = 204
    assert evaluate_expression("(25 - 3) * 7 + 50", [3, 7, 25, 50]) == 204
    # exact fractions: 7 / 2 = 7/2, times 2 is exactly 7 (a float path could drift)
    assert evaluate_expression("7 / 2 * 2", [2, 7, 2]) == 7
    assert evaluate_expression("1 / 3", [1, 3]) == Fraction(1, 3)
    # each number at most once: two 3s need two given 3s
    assert evaluate_expression("3 + 3", [3, 7]) is None
    assert evaluate_expression("3 + 3", [3, 3, 7]) == 6
    assert evaluate_expression("7", [3, 7]) == 7  # a subset of the numbers is allowed


@pytest.mark.parametrize(
    "text",
    [
        "2 ** 3", "-3 + 5", "3 / 0", "3 / (2 - 2)", "abs(3)", "3.0 + 2", "True + 2", "x + 2",
        "3 2", "", "   ", "(3 + 2", "3; 2", "__import__('os')", "[3, 2]", "3 // 2", "3 % 2",
        "(3).real", "3 == 3", "+3", "1" * 600,
    ],
)  # fmt: skip
def test_only_integer_literals_and_four_operations_are_accepted(text):
    assert evaluate_expression(text, [0, 2, 3, 3, 5, 111]) is None


def _reference_value(text: str) -> Fraction:
    """Python's own evaluation with every literal wrapped in Fraction (plain reference)."""
    wrapped = "".join(f"Fraction({tok})" if tok.isdigit() else tok for tok in text.split())
    return eval(wrapped, {"Fraction": Fraction})


def _random_text(rng: random.Random, numbers: list[int]) -> str:
    pool = [str(n) for n in numbers]
    while len(pool) > 1:
        a, b = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
        pool.append(f"( {a} {rng.choice('+-*/')} {b} )")
    return pool[0]


def test_evaluation_matches_python_on_random_expressions():
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        numbers = [rng.randint(1, 20) for _ in range(rng.randint(2, 6))]
        text = _random_text(rng, numbers)
        try:
            expected = _reference_value(text)
        except ZeroDivisionError:
            assert evaluate_expression(text, numbers) is None
            continue
        assert evaluate_expression(text, numbers) == expected
        checked += 1
    assert checked > 200


def test_value_is_invariant_to_order_of_numbers_and_spacing():
    numbers = [4, 9, 12, 75]
    for perm in ([75, 12, 9, 4], [9, 4, 75, 12]):
        assert evaluate_expression("75 - 12 * ( 9 - 4 )", perm) == 15  # 75 - 60
    assert evaluate_expression("75-12*(9-4)", numbers) == evaluate_expression(
        "75 - 12 * ( 9 - 4 )", numbers
    )


@pytest.mark.parametrize("seed", range(200))
def test_gold_solution_solves_generated_instance(seed):
    env = make("countdown")
    obs, info = env.reset(seed=seed)
    numbers, target = info["numbers"], info["target"]
    assert 3 <= len(numbers) <= 6 and all(1 <= n <= 100 for n in numbers)
    assert 1 <= target <= 999 and obs == f"numbers {' '.join(map(str, numbers))} target {target}"
    solution = env.solution()
    literals = [int(tok) for tok in solution.split() if tok.isdigit()]
    assert Counter(literals) == Counter(numbers)  # the gold expression uses every number once
    obs, reward, term, trunc, info = env.step(solution)
    assert (reward, term, trunc, info["success"], info["valid"]) == (1.0, True, False, True, True)
    assert obs.endswith("last correct")


def test_generator_respects_ranges_and_is_deterministic():
    for seed in range(30):
        a = generate_countdown(np.random.default_rng(seed), (4, 4), (1, 10), (50, 60))
        b = generate_countdown(np.random.default_rng(seed), (4, 4), (1, 10), (50, 60))
        numbers, target, solution = a
        assert a == b and len(numbers) == 4 and all(1 <= n <= 10 for n in numbers)
        assert 50 <= target <= 60 and evaluate_expression(solution, numbers) == target
    with pytest.raises(ValueError, match="target_range"):
        generate_countdown(np.random.default_rng(0), (2, 2), (1, 2), (900, 999), max_tries=50)


def test_wrong_answer_gets_format_reward_and_ends_single_turn():
    env = make("countdown", format_reward=0.1)
    _, info = env.reset(seed=3)
    number = info["numbers"][0]
    obs, reward, term, trunc, info = env.step(str(number))
    assert number != info["target"]
    assert (reward, term, trunc, info["success"], info["valid"]) == (0.1, True, False, False, True)
    assert obs.endswith("last too low" if number < info["target"] else "last too high")
    with pytest.raises(RuntimeError, match="ended"):
        env.step(env.solution())


@pytest.mark.parametrize("bad", ["2 ** 3", "hello", "", "999999 + 1"])
def test_invalid_answer_changes_nothing_and_allows_another_try(bad):
    env = make("countdown", max_steps=3, format_reward=0.1)
    obs0, info0 = env.reset(seed=5)
    obs, reward, term, trunc, info = env.step(bad)
    assert info["valid"] is False and reward == 0.0 and not term and not trunc
    assert obs == f"{obs0} last invalid" and info["anchor"] == info0["anchor"]
    assert info["numbers"] == info0["numbers"] and info["target"] == info0["target"]
    assert env.step(env.solution())[1] == 1.0


def test_invalid_last_try_truncates():
    env = make("countdown")
    env.reset(seed=1)
    _, reward, term, trunc, info = env.step("nope")
    assert (reward, term, trunc, info["success"]) == (0.0, False, True, False)


def test_multi_try_feedback_then_success():
    env = make("countdown", max_steps=3)
    _, info = env.reset(seed=8)
    low = min(info["numbers"])
    obs, reward, term, _, _ = env.step(str(low))
    assert not term and reward == 0.0 and "last too" in obs
    _, reward, term, _, info = env.step(env.solution())
    assert (reward, term, info["success"]) == (1.0, True, True)


def test_same_seed_same_instance():
    a, b = make("countdown"), make("countdown")
    for seed in range(10):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        assert a.solution() == b.solution() and a.instruction == b.instruction
    assert len({make("countdown").reset(seed=s)[0] for s in range(10)}) == 10


@pytest.mark.parametrize("first", ["1 + 1", "nope", None])
def test_snapshot_and_replay_fallback_restore_identical_futures(first):
    env = make("countdown", max_steps=4, format_reward=0.1)
    env.reset(seed=2)
    if first is not None:
        env.step(first)
    cheap, replay = env.snapshot(), TextEnv.snapshot(env)
    future = [str(env._last[1]["numbers"][0]), "bad", env.solution()]
    reference = [env.step(a) for a in future]
    for snap in (cheap, replay):
        env.restore(snap)
        assert [env.step(a) for a in future] == reference
    other = make("countdown", max_steps=4, format_reward=0.1)
    other.reset(seed=99)
    other.restore(cheap)
    assert [other.step(a) for a in future] == reference


def test_words_are_in_vocabulary():
    env = make("countdown", max_steps=3, number_range=(1, 30), target_range=(1, 200))
    vocab = set(env.vocabulary())
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        words = set(obs.split()) | set(env.solution().split())
        words |= set(env.step("1 + 1")[0].split()) | set(env.step(str(env.target))[0].split())
        assert words <= vocab, words - vocab
    assert make("countdown", target_range=(1, 10**9)).vocabulary() == []


@pytest.mark.parametrize(
    "options",
    [
        {"count": (1, 3)},
        {"count": (5, 3)},
        {"count": 4},
        {"number_range": (0, 10)},
        {"target_range": [5]},
        {"format_reward": 1.0},
        {"max_steps": 0},
        {"max_steps": 1.5},
        {"bogus": 1},
    ],
)
def test_bad_options_raise_value_error(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        make("countdown", **options)


def test_solution_and_step_need_reset():
    env = Countdown()
    with pytest.raises(RuntimeError, match="reset"):
        env.solution()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("1 + 2")


def test_unseeded_reset_records_its_seed_so_replay_is_exact():
    env = make("countdown", max_steps=2)
    obs, _ = env.reset()  # seed=None: the env draws a seed and keeps it for replay
    env.step("1 + 1")
    snap = TextEnv.snapshot(env)
    assert isinstance(snap.seed, int)
    restored, _ = env.restore(snap)
    assert restored.startswith(obs) and env.step(env.solution())[1] == 1.0


def test_key_steps_are_the_intermediate_operations_innermost_first():
    # ( 25 - 3 ) * 7 + 50: the steps 25 - 3 and ( 25 - 3 ) * 7; the last operation (+ 50)
    # is the whole answer, not an intermediate step; * accepts its operands swapped.
    assert key_steps("( 25 - 3 ) * 7 + 50") == [["25 - 3"], ["( 25 - 3 ) * 7", "7 * ( 25 - 3 )"]]
    assert key_steps("3 + 4") == []
    with pytest.raises(ValueError, match="not a countdown expression"):
        key_steps("x + 1")


@pytest.mark.parametrize("seed", range(20))
def test_reset_info_key_steps_all_occur_in_the_gold_solution(seed):
    env = make("countdown", count=(3, 5), number_range=(1, 20), target_range=(1, 200))
    _, info = env.reset(seed=seed)
    gold = env.solution()
    assert len(info["key_steps"]) == len(env.numbers) - 2  # one per merge but the last
    assert key_step_matches(gold, info["key_steps"]) == len(info["key_steps"])
    for alternatives in info["key_steps"]:  # every phrase computes a sub-result
        assert all(evaluate_expression(a, env.numbers) is not None for a in alternatives)


def test_solve_is_the_one_step_plan_that_wins():
    env = make("countdown")
    env.reset(seed=11)
    plan = env.solve()
    assert plan == [env.solution()]
    assert env.step(plan[0])[4]["success"]


# -- answers as language models write them ------------------------------------------------
SMALL = {"count": (3, 4), "number_range": (1, 20), "target_range": (1, 100)}  # the presets'


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 4 + 3 = 8", 8),  # the stated value is the expression's value
        ("Answer: (1 + 4) + 3", 8),
        ("answer is 1 + 4 + 3 = 8.", 8),
        ("`1 + 4 + 3`", 8),
        ("```1 + 4 + 3 = 8```", 8),
        ("$1 + 4 + 3 = 8$", 8),
        ("$1 + 4 + 3$ = 8", 8),
        ("(1 + 4) \u00d7 3", 15),  # the multiplication sign
        ("4 \u00f7 1 + 3", 7),
        ("1 + 4 + 3.", 8),
    ],
)
def test_read_answer_accepts_what_language_models_write(text, value):
    assert read_answer(text, [1, 3, 4]) == value


@pytest.mark.parametrize(
    "text",
    [
        "1 + 4 + 3 = 9",  # a false equation is not an answer: 1 + 4 + 3 is 8
        "1 + 4 = 5 + 3 = 8",  # chained steps: one expression is asked for
        "8 = 1 + 4 + 3",
        "1 + 4 + 3 = 8 = 8",
        "Answer:",
        "= 8",
        "1 + 4 + 4 = 9",  # 4 used twice
        "the answer is 8",
        "$$",
    ],
)
def test_read_answer_rejects_wrong_or_malformed_answers(text):
    assert read_answer(text, [1, 3, 4]) is None


def test_a_stated_value_that_misses_the_target_is_a_wrong_answer_not_a_success():
    env = make("countdown", allow_trivial=True, max_steps=2, **SMALL)
    env.reset(seed=0)  # numbers 18 1 11, target 30
    obs, reward, term, _, info = env.step("18 + 1 = 19")
    assert (reward, term, info["valid"], info["success"]) == (0.0, False, True, False)
    assert obs.endswith("last too low")
    obs, reward, term, _, info = env.step("Answer: 18 + 11 + 1 = 30")
    assert (reward, term, info["success"]) == (1.0, True, True)


def test_false_equation_is_invalid_even_when_it_names_the_target():
    env = make("countdown", allow_trivial=True, **SMALL)
    env.reset(seed=0)  # 18 + 1 + 11 is 30; 18 + 11 is 29
    _, reward, _, trunc, info = env.step("18 + 11 = 30")
    assert (reward, trunc, info["valid"], info["success"]) == (0.0, True, False, False)


# -- trivial targets ------------------------------------------------------------------------
def test_is_trivial_worked_examples():
    assert is_trivial([18, 1, 11], 30)  # 18 + 1 + 11
    assert is_trivial([3, 1, 19], 57)  # 3 * 1 * 19
    assert not is_trivial([2, 4, 5, 4], 11)  # 5 + 4 - 2 + 4 needs a search


def test_generator_redraws_trivial_targets_unless_allowed():
    allowed = make("countdown", allow_trivial=True, **SMALL)
    redrawn = make("countdown", **SMALL)
    trivial = 0
    for seed in range(60):
        _, a = allowed.reset(seed=seed)
        _, b = redrawn.reset(seed=seed)
        trivial += is_trivial(list(a["numbers"]), a["target"])
        assert not is_trivial(list(b["numbers"]), b["target"])
        assert redrawn.step(redrawn.solution())[4]["success"]
    assert trivial >= 10  # seeds 0 5 9 17 20 21 26 27 33 36 ... are sum/product targets


def test_allow_trivial_must_be_a_bool():
    with pytest.raises(ValueError, match="allow_trivial must be True or False"):
        make("countdown", allow_trivial="no")


def test_use_all_makes_an_answer_that_leaves_a_number_out_invalid():
    # A single number or a partial sum is a valid answer "at most once", invalid "exactly
    # once" (the near-target single number was where RL settled under closeness_reward).
    assert evaluate_expression("(9)", [9, 1, 1]) == 9
    assert evaluate_expression("(9)", [9, 1, 1], use_all=True) is None
    assert evaluate_expression("2 + 3", [2, 3, 10], use_all=True) is None
    assert evaluate_expression("(2 + 3) * 10", [2, 3, 10], use_all=True) == 50
    assert evaluate_expression("2 + 3 + 10 + 10", [2, 3, 10], use_all=True) is None
    assert read_answer("Answer: 10 * 2 + 3 = 23", [2, 3, 10], use_all=True) == 23
    env = make(
        "countdown", render="text", allow_trivial=True, use_all=True, closeness_reward=0.3,
        **SMALL,
    )  # fmt: skip
    assert env.reset(seed=0)[0] == "Numbers: 18, 1, 11. Target: 30."
    assert env.instruction.endswith("Use each number exactly once.")
    _, reward, _, truncated, info = env.step("18 + 11")  # 29: close, but 1 is left out
    assert (reward, info["valid"], truncated) == (0.0, False, True)
    env.reset(seed=0)
    assert env.step("18 + 11 - 1")[1] == pytest.approx(0.3 * (1 - 2 / 30))  # 28, all used
    env.reset(seed=0)
    assert env.step("18 + 11 + 1")[1] == 1.0
    with pytest.raises(ValueError, match="use_all must be True or False"):
        make("countdown", use_all=1)


# -- prompts for language models ------------------------------------------------------------
def test_text_render_states_the_task_in_words():
    env = make("countdown", render="text", allow_trivial=True, max_steps=2, **SMALL)
    obs, _ = env.reset(seed=0)
    assert obs == "Numbers: 18, 1, 11. Target: 30."
    # the rules only, the same for every instance: the instance is in the observation, so
    # every prompt of an iteration shares the instruction as one prefix
    rules = (
        "Countdown: combine the given numbers with + - * / and parentheses into one "
        "arithmetic expression whose value is the target. Use each number at most once."
    )
    assert env.instruction == rules
    assert "18" not in env.instruction and "30" not in env.instruction
    obs = env.step("18 + 1")[0]
    assert obs == "Numbers: 18, 1, 11. Target: 30. Your last answer was too low."
    assert env.reset(seed=1)[0] != "Numbers: 18, 1, 11. Target: 30." and env.instruction == rules
    with pytest.raises(ValueError, match="render"):
        make("countdown", render="grid")


def test_gold_action_is_the_solution_while_the_episode_is_on():
    env = make("countdown")
    assert env.gold_action() is None  # before reset
    env.reset(seed=4)
    gold = env.gold_action()
    assert gold == env.solution()
    assert env.step(gold)[4]["success"]
    assert env.gold_action() is None  # the episode is over
    assert evaluate_expression(Countdown.example_action, [1, 2, 3]) == 9
