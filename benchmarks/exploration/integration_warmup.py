"""A supervised warm-up that gives the tiny model a level for the LADDER comparison.

LADDER starts from a model that solves some easy problems and climbs from there; a
randomly initialised model writes expressions that never parse, so no curriculum gets a
reward (section ladder of benchmarks/results/exploration/exploration_compare.md). This
script teaches the tiny model of ``configs/integration_ladder.yaml`` level-1 integrals
(polynomials) by teacher forcing on sympy's antiderivatives, then saves it as a model
directory for ``model.path``:

    python benchmarks/exploration/integration_warmup.py --out runs/integration_warmup \\
        --set rollout.max_new_tokens=48
    python benchmarks/exploration/exploration_compare.py ladder \\
        --set model.path=runs/integration_warmup --set rollout.max_new_tokens=48 --tag warmup

(The preset's 16 new tokens hold only 28 % of level-1 answers as sympy writes them.)

It prints greedy success on held-out problems of levels 1, 2 and 3 after the warm-up (the
RL comparison is then on levels 2-3, above the warmed-up level). ``--atoms N`` adds N
examples of level 2's building blocks, exp(x), sin(x) and cos(x), bare or (with
``--atom-coefficients``) as c*f(x), and reports greedy success on 60 held-out ones, so that
the variants at the bottom of a level-2 tree are within the model's level; ``--monomials
N`` (with ``--problems 0``) teaches only one-term polynomials, the pieces of level 1.
``--polynomials 1:500,2:500,3:500,4:500,5:60`` teaches polynomials by their number of terms
(N problems of K terms for each K:N; the env's ``terms`` option) and reports greedy success
per number of terms, so a model can be left with a level in length: LADDER's polynomial
setting warms up on 1-4 terms with a few of 5 (section ladder_poly_try3 of that record),
or of 5 and 6 (ladder_poly_try4), and asks for 6. ``--evaluate MODEL_DIR`` trains nothing
and reports those greedy numbers for a saved model, e.g. a LADDER run's last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from cairn.agent import parse_action
from cairn.envs import make
from cairn.envs.integrands import TERMS
from cairn.train.config import load_config
from cairn.train.trainer import Trainer
from cairn.train.warmup import supervised_passes

ROOT = Path(__file__).resolve().parents[2]
TRAIN_SEEDS, TEST_SEEDS = 1_000_000, 2_000_000  # apart from the RL runs' seeds


ATOMS = ("exp(x)", "sin(x)", "cos(x)")  # the bare building blocks of level 2
COEFFICIENTS = [c for c in range(-9, 10) if c]


def monomial_integrands(n: int, seed: int) -> list[str]:
    """n one-term polynomials c*x**k (c in +-1..9, k in 0..5): the pieces of level 1."""
    rng = random.Random(seed)
    return [f"{rng.choice(COEFFICIENTS)}*x**{rng.randrange(6)}" for _ in range(n)]


def atom_integrands(n: int, coefficients: bool, seed: int) -> list[str]:
    """n integrands c*f(x), f an atom (cycled); c = 1, or uniform in +-1..9 (seeded)."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        c = rng.choice(COEFFICIENTS) if coefficients else 1
        atom = ATOMS[k % len(ATOMS)]
        out.append(atom if c == 1 else f"-{atom}" if c == -1 else f"{c}*{atom}")
    return out


def polynomial_counts(spec: str) -> dict[int, int]:
    """``"2:500,5:60"`` -> {2: 500, 5: 60}: problems per number of terms."""
    try:
        counts = {int(k): int(n) for k, n in (item.split(":") for item in spec.split(",") if item)}
    except ValueError as err:
        raise SystemExit(f"--polynomials: expected TERMS:COUNT,..., got {spec!r}") from err
    if any(k not in TERMS or n < 0 for k, n in counts.items()):
        raise SystemExit(f"--polynomials: terms must be in {list(TERMS)}, counts >= 0: {spec!r}")
    return counts


def pairs(
    policy,
    prompt,
    level: int,
    n: int,
    first_seed: int,
    integrand: str | None = None,
    terms: int | None = None,
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + eos) for n problems of one level (or of one integrand;
    or level-1 polynomials of ``terms`` terms)."""
    env = make("integration", level=level, integrand=integrand, **_terms(terms))
    out = []
    for seed in range(first_seed, first_seed + n):
        obs, _ = env.reset(seed=seed)
        text = prompt.build(env.instruction, [], obs)
        out.append((policy.encode(text), [*policy.encode(env.solution()), policy.eos_id]))
    return out


def _terms(terms: int | None) -> dict[str, int]:
    return {} if terms is None else {"terms": terms}


def greedy_success(
    policy, prompt, cfg, level: int, n: int, integrand: str | None = None, terms: int | None = None
) -> float:
    env = make("integration", level=level, integrand=integrand, **_terms(terms))
    wins = 0
    for seed in range(TEST_SEEDS, TEST_SEEDS + n):
        obs, _ = env.reset(seed=seed)
        ids = policy.encode(prompt.build(env.instruction, [], obs))
        gen = policy.generate(
            [ids], greedy=True, max_new_tokens=cfg.rollout.max_new_tokens, stop=cfg.rollout.stop
        )[0]
        _, _, _, _, info = env.step(parse_action(gen.text, cfg.agent.action_pattern) or "")
        wins += bool(info.get("success"))
    return wins / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="runs/integration_warmup")
    p.add_argument("--problems", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval", type=int, default=100, help="held-out problems per level")
    p.add_argument(
        "--atoms",
        type=int,
        default=0,
        help=f"extra examples of the level-2 building blocks {', '.join(ATOMS)} (cycled)",
    )
    p.add_argument(
        "--monomials",
        type=int,
        default=0,
        help="extra one-term polynomials c*x**k (with --problems 0: the model knows only these)",
    )
    p.add_argument(
        "--polynomials",
        default="",
        metavar="K:N,...",
        help="N level-1 polynomials of exactly K terms, for each K:N (e.g. 1:500,5:60)",
    )
    p.add_argument(
        "--atom-coefficients",
        action="store_true",
        help="atoms with an integer coefficient c*f(x), c in +-1..9 (else bare)",
    )
    p.add_argument(
        "--evaluate",
        metavar="MODEL_DIR",
        default=None,
        help="train nothing: greedy success of a saved model (a warm-up, or a run's "
        "checkpoints/iter_N) per level and per number of terms",
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    model = [f"model.path={args.evaluate}"] if args.evaluate else []
    cfg = load_config(
        ROOT / "configs" / "integration_ladder.yaml",
        ["log.progress=false", *args.overrides, *model],
    )
    with tempfile.TemporaryDirectory() as scratch:
        builder = Path(scratch if args.evaluate else args.out) / "builder"
        trainer = Trainer(cfg, builder)
    policy, prompt = trainer.policy, trainer.prompt
    data: list[tuple[list[int], list[int]]] = []
    losses: list[float] = []
    counts = polynomial_counts(args.polynomials)
    if not args.evaluate:
        data = pairs(policy, prompt, 1, args.problems, TRAIN_SEEDS)
        for integrand in atom_integrands(args.atoms, args.atom_coefficients, cfg.seed):
            data += pairs(policy, prompt, 1, 1, 0, integrand)
        for integrand in monomial_integrands(args.monomials, cfg.seed):
            data += pairs(policy, prompt, 1, 1, 0, integrand)
        for k, n in counts.items():
            data += pairs(policy, prompt, 1, n, TRAIN_SEEDS + 100_000 * k, terms=k)
        data = [(p, a) for p, a in data if len(a) <= cfg.rollout.max_new_tokens]  # that fit
        losses = supervised_passes(
            policy, data, epochs=args.epochs, lr=args.lr, minibatch_size=64, time_budget_s=None,
            seed=cfg.seed,
        ).epoch_losses  # fmt: skip
        policy.model.save_pretrained(args.out, safe_serialization=True)
        policy.tokenizer.save_pretrained(args.out)
    policy.model.eval()
    success = {f"level{lv}": greedy_success(policy, prompt, cfg, lv, args.eval) for lv in (1, 2, 3)}
    held_out = {
        "atoms": atom_integrands(60, args.atom_coefficients, cfg.seed + 1) if args.atoms else [],
        "monomials": monomial_integrands(60, cfg.seed + 1) if args.monomials else [],
    }
    for name, integrands in held_out.items():
        if integrands:
            wins = [greedy_success(policy, prompt, cfg, 1, 1, f) for f in integrands]
            success[name] = sum(wins) / len(wins)
    if counts or args.evaluate:
        for k in TERMS:
            success[f"terms{k}"] = greedy_success(policy, prompt, cfg, 1, args.eval, terms=k)
    losses = [round(x, 4) for x in losses]
    print(json.dumps({"problems": len(data), "loss_per_epoch": losses, "greedy": success}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
