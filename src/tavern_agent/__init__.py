"""tavern-agent: the agent tool system of a roleplay chat app.

The public entry points live in :mod:`tavern_agent.core` (pure values) and
:mod:`tavern_agent.tools` (catalog, snapshots, the request gate, dispatch).
"""

__version__ = "0.1.0"
