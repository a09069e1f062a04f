"""The commands of ``tavern-agent``, one module per command or group.

:mod:`tavern_agent.cli` is the root group that joins them. Commands turn flags
into calls on the layers below and their errors into click errors; nothing
below this package imports it.
"""
