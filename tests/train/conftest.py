"""Train tests: shared stand-ins live in checkpoint_stubs.py (importable by the modules)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
