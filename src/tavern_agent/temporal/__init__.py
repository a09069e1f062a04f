"""Runs as Temporal workflows (the optional ``tavern-agent[temporal]`` extra).

A run is one workflow whose id is the run id. The workflow
(:mod:`~tavern_agent.temporal.workflow`) only loops; each step of the run is
one activity (:mod:`~tavern_agent.temporal.activities`) that opens the run
from the shared data root, folds its journal and does exactly one step, so a
step cut off on one worker is taken again, from the journal, by another.
"""
