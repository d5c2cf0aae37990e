"""Data contracts: the step table (StepBatch), episodes and the token batch a loss consumes."""

from cairn.data.step_batch import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, StepBatch, register_column

__all__ = ["OPTIONAL_COLUMNS", "REQUIRED_COLUMNS", "StepBatch", "register_column"]
