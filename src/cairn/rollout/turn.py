"""One turn of one episode, the step shared by ``cairn train``'s batched loop
(``cairn.rollout.loop.play``) and verl's asynchronous agent loop
(``cairn.integrations.verl.episode``): every ``agent.*`` key means the same in both.

``instruction_for``: the instruction a prompt starts with: ``agent.instruction`` when set,
else the env's (which may change on reset), followed by the answer format of
``agent.action_format`` when ``agent.describe_format`` is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.agent import describe_format

if TYPE_CHECKING:
    from cairn.envs import TextEnv
    from cairn.rollout.loop import RolloutSettings

__all__ = ["instruction_for"]


def instruction_for(
    env: TextEnv, settings: RolloutSettings, tools_in_template: bool = False
) -> str:
    """The instruction of ``env``'s prompts under ``settings`` (module docstring);
    ``tools_in_template``: the chat template renders the env's tools itself."""
    base = settings.instruction if settings.instruction is not None else env.instruction
    if not settings.describe_format:
        return base
    fmt = describe_format(settings.action_format, env.example_action, env.tools, tools_in_template)
    return f"{base}\n{fmt}" if base else fmt
