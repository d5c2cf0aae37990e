"""Helpers the benchmark scripts share, not part of the cairn package: the markdown records
of measurements (``records``), pass@k of a trained run's samples (``pass_at_k``) and the
result of an arm run in a fresh process (``arms``).

A script imports them after putting benchmarks/ on its path (it runs as
``python benchmarks/<study>/<script>.py``, with only its own folder on the path):

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from _lib.records import write_section
"""

__all__: list[str] = []
