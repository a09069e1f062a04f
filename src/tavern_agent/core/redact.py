"""Secrets out of everything stored or printed: the API key and a URL's user-info.

A provider may echo the key it was sent (a 401 body, an error inside a
stream), and a base URL may carry ``user:password@``. A :class:`Redactor`
knows those strings and replaces each occurrence, in text or in any JSON
value, with :data:`MASK`. The model gateway applies it to every reply and
error before they reach the journal, the audit files or the terminal; run
records keep only :func:`url_without_userinfo`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

MASK = "[redacted]"
# Shorter strings are too likely to be ordinary text ("admin", "user"), and
# redacting them would mangle what a model wrote without protecting much.
MIN_SECRET_CHARS = 6


def _spellings(secret: str) -> set[str]:
    """The secret as it may appear: verbatim, JSON-escaped, percent-encoded or decoded."""
    forms = {secret, unquote(secret), quote(secret, safe=""), json.dumps(secret)[1:-1]}
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def url_secrets(url: str) -> list[str]:
    """The user name and password of ``url``'s user-info, if it has any."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [s for s in (parts.username, parts.password) if s]


def url_without_userinfo(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by :data:`MASK`, for records."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


class Redactor:
    """Replaces known secrets in text and JSON values; a no-op without secrets."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        found: set[str] = set()
        for secret in secrets:
            if secret:
                found |= _spellings(secret)
        # Longest first, so a secret that contains another is masked whole.
        self.secrets = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """``text`` with every known secret replaced by :data:`MASK`."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def value(self, value: Any) -> Any:
        """A copy of a JSON value with every string (keys too) redacted."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def holds_secret(self, value: Any) -> bool:
        """Whether a secret occurs anywhere in a JSON value."""
        if not self.secrets:
            return False
        text = json.dumps(value, ensure_ascii=False, default=str)
        return any(secret in text for secret in self.secrets)
