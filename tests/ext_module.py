"""A Python extension module for the CLI tests (`tavern-agent --ext tests.ext_module`)."""

from __future__ import annotations

from tavern_agent.extensions import registry


@registry.tool(extension_id="py-test", name="shout", description="Upper-case text.")
def shout(text: str) -> str:
    return text.upper() + "!"
