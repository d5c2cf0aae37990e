"""Exploration methods: memory (EMPO2), strategies (SGE), variants (LADDER), self-search."""
