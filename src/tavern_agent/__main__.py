"""``python -m tavern_agent`` runs the command line."""

from tavern_agent.cli import main

main()
