"""The settings of the smallest training run the train tests start (seconds on one core):
2 groups of 2 episodes, one PPO epoch, 2 held-out episodes at the end only, a checkpoint
every iteration. Add ``train.iterations=N``."""

TINY_RUN = [
    "rollout.groups=2",
    "rollout.group_size=2",
    "optim.epochs=1",
    "eval.episodes=2",
    "eval.every=0",
    "eval.at_start=false",
    "train.time_budget_s=null",
    "train.threads=1",
    "log.progress=false",
    "checkpoint.every=1",
]
