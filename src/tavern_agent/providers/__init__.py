"""Model protocol codecs: tools out, calls in, history back (R1.3, R3.4, R5.1, R5.4).

``transcript`` is the provider-neutral record; ``repair`` pairs every call with
exactly one result; ``ids`` keeps call ids valid per protocol; one module per
protocol (``openai_chat``, ``openai_responses``, ``anthropic``, ``gemini``)
implements :class:`~tavern_agent.providers.codec.Codec`.
"""
