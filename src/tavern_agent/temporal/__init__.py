"""Runs as Temporal workflows (the optional ``tavern-agent[temporal]`` extra).

A run is one workflow whose id is the run id. The workflow
(:mod:`~tavern_agent.temporal.workflow`) only loops; each model request and
each tool call of the run is one activity
(:mod:`~tavern_agent.temporal.activities`) that opens the run from the shared
data root (or goes on with the engine its worker kept), folds its journal and
does exactly that, so an activity cut off on one worker is taken again, from
the journal, by another.
"""
