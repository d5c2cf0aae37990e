"""cairn: reinforcement learning for multi-turn LLM agents.

Exploration (EMPO2, LUFFY, TreePO, LADDER, SGE, SSRL) and credit assignment (GiGPO, ELPO,
ProxMO, Step-GRPO, ARPO, VinePPO, IGPO) in one library, with the baselines they are
measured against.
"""

__version__ = "0.1.0"
