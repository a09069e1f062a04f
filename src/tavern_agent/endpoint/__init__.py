"""The agent endpoint: chat frontends reach the agent through the OpenAI Chat Completions API.

``tavern-agent serve --model NAME`` answers ``POST /v1/chat/completions`` with
an agent run per request (see :mod:`tavern_agent.endpoint.app`) and lists the
profiles at ``GET /v1/models``.
"""
