"""Model protocol codecs: tools out, calls in, history back.

``transcript`` is the provider-neutral record; ``repair`` pairs every call with
exactly one result; ``ids`` keeps call ids valid per protocol; one module per
protocol (``openai_chat``, ``openai_responses``, ``anthropic``, ``gemini``)
implements :class:`~tavern_agent.providers.codec.Codec`.
"""
