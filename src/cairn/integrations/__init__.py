"""Adapters that plug cairn's pieces into other RL frameworks (``cairn.integrations.verl``)."""
