"""What a model's context window is, what a provider counted, and its overflow errors.

A run keeps its requests within its model's window (see
:mod:`tavern_agent.runtime.context`). The window comes from, in order: the
``--context-window`` flag, the profile, the server where it says (llama.cpp's
``GET /props``, a ``GET /models`` entry's metadata), a table of known model
families per protocol, and last :data:`DEFAULT_WINDOW`. This module holds the
parts that know providers: the table, the server questions, the names each
protocol gives its token counts, and the shapes of each protocol's
"context too long" error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from tavern_agent.core.naming import ModelProtocol

DEFAULT_WINDOW = 16_384
"""The window of a model nothing tells: what most local servers are run with or above.
A model served with less needs ``--context-window``."""


@dataclass(frozen=True, slots=True)
class WindowFacts:
    """A model's window as its gateway knows it, and the answer room a request asks.

    ``source`` says where ``tokens`` came from: ``flag``, ``server``, ``table``,
    ``default`` or ``recording`` (a replay reads the recorded run's window).
    ``scale`` is what the model's tokens are taken to be per token of the
    estimate (:func:`estimate_tokens`, made for OpenAI's tokenizer) until a
    count of the server's own says better: 1 for OpenAI's models,
    :data:`UNKNOWN_TOKENIZER` for a model whose tokenizer nothing tells.
    """

    tokens: int
    source: str
    max_tokens: int
    scale: float = 1.0


# Known model families, newest names first within a protocol: (prefix, window).
_TABLE: Mapping[ModelProtocol, tuple[tuple[str, int], ...]] = {
    ModelProtocol.OPENAI_CHAT: (
        ("gpt-5", 400_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5-turbo", 16_385),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
    ),
    ModelProtocol.ANTHROPIC: (("claude", 200_000),),
    ModelProtocol.GEMINI: (
        ("gemini-1.5-pro", 2_097_152),
        ("gemini", 1_048_576),
    ),
}
_TABLE = {**_TABLE, ModelProtocol.OPENAI_RESPONSES: _TABLE[ModelProtocol.OPENAI_CHAT]}


def table_window(protocol: ModelProtocol, model: str) -> int | None:
    """The window of a known model family, else ``None``."""
    name = model.lower().removeprefix("models/").rsplit("/", 1)[-1]
    for prefix, tokens in _TABLE.get(protocol, ()):
        if name.startswith(prefix):
            return tokens
    return None


# Keys a server's model entry may give its window under (llama.cpp, vLLM, LM Studio,
# OpenRouter and the like).
_MODEL_KEYS = ("context_length", "context_window", "max_context_length", "max_model_len")


async def server_window(
    client: httpx.AsyncClient, base_url: str, model: str, headers: Mapping[str, str] | None = None
) -> int | None:
    """The window an OpenAI-compatible server says it runs ``model`` with, else ``None``.

    llama.cpp answers ``GET /props`` (beside ``/v1``) with the slot's ``n_ctx``;
    other servers put the window in their ``GET /models`` entry. Any failure
    (no such route, no server) is ``None``: the window comes from elsewhere.
    ``headers`` carry the key, for a server that wants it on every route.
    """
    base = base_url.rstrip("/")
    root = base.removesuffix("/v1")
    props = await _get_json(client, f"{root}/props", headers)
    if isinstance(props, Mapping):
        settings = props.get("default_generation_settings")
        for value in (
            props.get("n_ctx"),
            settings.get("n_ctx") if isinstance(settings, Mapping) else None,
        ):
            if isinstance(value, int) and value > 0:
                return value
    models = await _get_json(client, f"{base}/models", headers)
    entries = models.get("data") if isinstance(models, Mapping) else None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or entry.get("id") not in (model, None):
            continue
        meta = entry.get("meta")
        meta = meta if isinstance(meta, Mapping) else {}
        for value in (*(entry.get(k) for k in _MODEL_KEYS), meta.get("n_ctx")):
            if isinstance(value, int) and value > 0:
                return value
    return None


async def is_llama_cpp(
    client: httpx.AsyncClient, base_url: str, headers: Mapping[str, str] | None = None
) -> bool:
    """Whether the server at ``base_url`` is llama.cpp's (its ``GET /props`` answers
    with the slots' ``default_generation_settings``)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    props = await _get_json(client, f"{root}/props", headers)
    return isinstance(props, Mapping) and "default_generation_settings" in props


async def _get_json(client: httpx.AsyncClient, url: str, headers: Mapping[str, str] | None) -> Any:
    try:
        response = await client.get(url, headers=headers, timeout=httpx.Timeout(3.0))
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None


# ---------------------------------------------------------------- counting

# Roughly the pieces a BPE tokenizer's pre-split makes of ASCII text: a word with its
# leading space, up to three digits, a run of punctuation, a run of whitespace. Most
# such pieces are one token of o200k; other scripts cost about a token per extra
# UTF-8 byte pair.
_PIECES = re.compile(r" ?[A-Za-z]+| ?[0-9]{1,3}| ?[!-/:-@\[-`{-~]+|\s+")
PIECE_TOKENS = 0.985


UNKNOWN_TOKENIZER = 1.3
"""The estimate's scale for a model whose tokenizer is not known (a local model on an
OpenAI-compatible server) until a count of its own is: tokenizers with smaller
vocabularies than OpenAI's make up to about this many more tokens of the same
request (SmolLM2's made 1.23 times as many of the example's first request, chat
template included). Over, rather than under: a request cut silently costs more
than one compacted a round early."""


def tokenizer_scale(protocol: ModelProtocol, model: str, openai_host: bool) -> float:
    """The estimate's scale before any count (see :class:`WindowFacts`).

    OpenAI's own API (``openai_host``) and OpenAI's model families anywhere
    count as the estimate does; an ``openai_chat`` or ``openai_responses``
    model otherwise is a local or third-party one, whose tokenizer nothing
    tells. Anthropic's and Gemini's count near it and correct it after a round.
    """
    if protocol not in (ModelProtocol.OPENAI_CHAT, ModelProtocol.OPENAI_RESPONSES):
        return 1.0
    if openai_host or table_window(protocol, model) is not None:
        return 1.0
    return UNKNOWN_TOKENIZER


async def server_count(
    client: httpx.AsyncClient, base_url: str, body: bytes, headers: Mapping[str, str] | None = None
) -> int | None:
    """The prompt tokens of a Chat Completions ``body`` as llama.cpp's server counts them.

    ``POST /apply-template`` renders the request (messages and tools) through
    the server's chat template, as ``/v1/chat/completions`` would, and
    ``POST /tokenize`` counts the prompt with the model's own tokenizer: the
    exact count, before the request is sent. ``None`` when the server fails;
    ask only a server :func:`is_llama_cpp` says is one.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    timeout = httpx.Timeout(30.0, connect=3.0)
    asked = {"content-type": "application/json", **(headers or {})}
    try:
        rendered = await client.post(
            f"{root}/apply-template", content=body, headers=asked, timeout=timeout
        )
        prompt = rendered.json().get("prompt") if rendered.status_code == 200 else None
        if not isinstance(prompt, str):
            return None
        ask = {"content": prompt, "add_special": True, "parse_special": True}
        counted = await client.post(f"{root}/tokenize", json=ask, headers=headers, timeout=timeout)
        tokens = counted.json().get("tokens") if counted.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return len(tokens) if isinstance(tokens, list) else None


def estimate_tokens(text: str) -> int:
    """A fast estimate of ``text``'s tokens, meant to be slightly over a BPE tokenizer's count."""
    if not text:
        return 0
    extra = len(text.encode("utf-8")) - len(text)  # non-ASCII text
    return int(len(_PIECES.findall(text)) * PIECE_TOKENS + extra / 2) + 1


# ---------------------------------------------------------------- what a provider counted


def prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """The prompt's tokens as the provider counted them, from a response's ``usage``.

    Chat Completions says ``prompt_tokens``, Responses and Anthropic
    ``input_tokens`` (Anthropic's cached parts are counted apart), Gemini
    ``promptTokenCount``.
    """
    for key in ("prompt_tokens", "input_tokens", "promptTokenCount"):
        value = usage.get(key)
        if isinstance(value, int):
            cached = (
                usage.get("cache_read_input_tokens", 0),
                usage.get("cache_creation_input_tokens", 0),
            )
            extra = sum(c for c in cached if isinstance(c, int)) if key == "input_tokens" else 0
            return value + extra
    return None


def output_tokens(usage: Mapping[str, Any]) -> int | None:
    """The answer's tokens as the provider counted them, else ``None``."""
    for key in ("completion_tokens", "output_tokens", "candidatesTokenCount"):
        value = usage.get(key)
        if isinstance(value, int):
            return value
    return None


# ---------------------------------------------------------------- overflow errors

# Each protocol's "the prompt is over the window" error, and llama.cpp's (its
# ``exceed_context_size_error`` and the older wordings).
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long"
    r"|exceeds? the maximum number of tokens|input token count .* exceeds"
    r"|exceed_context_size_error|exceeds the available context size"
    r"|context size has been exceeded|input is too large to process"
    r"|too many tokens|context window",
    re.IGNORECASE,
)


def is_overflow(status: int | None, text: str) -> bool:
    """Whether a provider's error says the request was over the model's window."""
    return status in (None, 400, 413, 422, 500) and _OVERFLOW.search(text) is not None
