"""Exploration methods composed around any rollout strategy: memory (EMPO2), demonstrations
(LUFFY) and variants (LADDER) are hooks (``cairn.exploration.hooks``), composed by
``Exploration`` (``cairn.exploration.methods``); SGE and SSRL sample the episodes themselves,
so they are rollout strategies (``rollout.strategy: sge`` / ``ssrl``:
``cairn.exploration.sge``, ``cairn.exploration.self_search``). Their config sections are
``cairn.exploration.config``, their replaceable parts' registries
``cairn.exploration.registries``.
"""

from cairn.exploration.methods import HOOK_ORDER, Exploration

__all__ = ["HOOK_ORDER", "Exploration"]
