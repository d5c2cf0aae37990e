"""``python -m cairn.cli``: the ``cairn`` command."""

import sys

from cairn.cli import main

__all__: list[str] = []

sys.exit(main())
