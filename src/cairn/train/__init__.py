"""Training: configuration, the trainer loop, checkpoints and run logs."""

from cairn.train.config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]
