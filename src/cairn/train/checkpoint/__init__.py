"""Checkpoints of a training run: written atomically, without pickle, read back without trust.

Two entries, one for each direction:

- writing, ``write.save_checkpoint(run_dir, cfg, parts, state, wall_seconds, rows)``: the
  checkpoint of a trainer after its latest iteration (weights, trainer state, config);
- reading, ``read.latest_checkpoint(run_dir)``: the newest valid checkpoint of a run, a
  ``read.Checkpoint`` whose methods load its state, put it back into a trainer and give
  the config to resume with (``cairn eval`` and ``export`` read its weights from its
  ``path``).

The modules behind them, one job each: ``layout`` (the folder, its names, the errors),
``codec`` (a state as JSON and tensors), ``schema`` (what a trainer state may hold),
``state`` (``TrainState``: the loop's counters and random streams), ``resume`` (what a
checkpoint keeps of a trainer, and putting it back), ``runconfig`` (the config's hash,
amendments and the config to resume with). This package imports nothing itself, so that
reading a run's config (``runconfig``, for ``cairn.train.trust``) needs no torch.
"""

__all__: list[str] = []
