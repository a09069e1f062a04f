"""Extension tools: plain functions registered by Python code and by web pages.

* :class:`ExtensionRegistry` / :data:`registry` — Python functions, ``@registry.tool(...)``;
* :class:`ExtensionHost` — the WebSocket host pages register tools with (``tavern-agent serve``);
* :class:`RemoteExtensionTools` — a running host, reached from another process;
* :class:`CombinedExtensionTools` — several of these as the one ``ExtensionTools`` port.
"""

from tavern_agent.extensions.host import ExtensionHost
from tavern_agent.extensions.python import (
    AlreadyRegistered,
    ExtensionContext,
    ExtensionRegistry,
    registry,
)
from tavern_agent.extensions.remote import (
    CombinedExtensionTools,
    HostFiles,
    HostUnavailable,
    RemoteExtensionTools,
)

__all__ = [
    "AlreadyRegistered",
    "CombinedExtensionTools",
    "ExtensionContext",
    "ExtensionHost",
    "ExtensionRegistry",
    "HostFiles",
    "HostUnavailable",
    "RemoteExtensionTools",
    "registry",
]
