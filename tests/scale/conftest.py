"""Test helpers for scale-out: a CPU stand-in for vLLM (fake_vllm), the DDP job script."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # fake_vllm
