"""One codec per protocol."""

from __future__ import annotations

from tavern_agent.core.naming import ModelProtocol
from tavern_agent.providers.anthropic import AnthropicCodec
from tavern_agent.providers.codec import Codec
from tavern_agent.providers.gemini import GeminiCodec
from tavern_agent.providers.openai_chat import OpenAIChatCodec
from tavern_agent.providers.openai_responses import OpenAIResponsesCodec

CODECS: dict[ModelProtocol, Codec] = {
    ModelProtocol.OPENAI_CHAT: OpenAIChatCodec(),
    ModelProtocol.OPENAI_RESPONSES: OpenAIResponsesCodec(),
    ModelProtocol.ANTHROPIC: AnthropicCodec(),
    ModelProtocol.GEMINI: GeminiCodec(),
}


def codec_for(protocol: ModelProtocol) -> Codec:
    """The codec of ``protocol``."""
    return CODECS[protocol]
