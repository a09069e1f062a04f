"""``send_date`` values in the formats SillyTavern has written over the years.

A commit writes its date in the format the chat already uses, so SillyTavern
sorts and shows the new message like the others:

* ``humanized``: ``December 2, 2025 10:56am`` (``moment().format('LL LT')``
  style, SillyTavern 1.9 to 1.12);
* ``iso``: ``2025-12-02T10:56:07.123Z`` (``Date.prototype.toISOString``);
* ``at``: ``2023-4-21 @20h 02m 47s 124ms`` (``humanizedDateTime``, early 2023);
* ``epoch_ms``: ``1674563371558``, a number (``Date.now()``, the oldest chats).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

HUMANIZED, ISO, AT, EPOCH_MS = "humanized", "iso", "at", "epoch_ms"
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})$")
_AT = re.compile(r"^\d{4}-\d{1,2}-\d{1,2} @\d{1,2}h \d{1,2}m \d{1,2}s \d{1,3}ms$")
_HUMANIZED = re.compile(r"^[A-Z][a-z]+ \d{1,2}, \d{4} \d{1,2}:\d{2} ?[ap]m$", re.IGNORECASE)


def date_format(value: Any) -> str | None:
    """The format of one ``send_date`` value, or ``None`` when it is none of the known ones."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return EPOCH_MS
    if not isinstance(value, str):
        return None
    for name, pattern in ((ISO, _ISO), (AT, _AT), (HUMANIZED, _HUMANIZED)):
        if pattern.match(value.strip()):
            return name
    return None


def chat_date_format(values: Iterable[Any], default: str = HUMANIZED) -> str:
    """The format of the newest recognisable date in ``values`` (oldest first)."""
    found = default
    for value in values:
        found = date_format(value) or found
    return found


def send_date(now: datetime | None = None, fmt: str = HUMANIZED) -> str | int:
    """``now`` (default: the current time) as a ``send_date`` in format ``fmt``."""
    if now is None:
        now = datetime.now(UTC).astimezone()  # local time, with its zone
    elif now.tzinfo is None:
        now = now.astimezone()
    if fmt == EPOCH_MS:
        return int(now.timestamp() * 1000)
    if fmt == ISO:
        utc = now.astimezone(UTC)
        return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"
    if fmt == AT:
        ms = now.microsecond // 1000  # SillyTavern pads milliseconds to two digits only
        clock = f"{now.hour:02d}h {now.minute:02d}m {now.second:02d}s {ms:02d}ms"
        return f"{now.year}-{now.month}-{now.day} @{clock}"
    hour = now.hour % 12 or 12
    suffix = "am" if now.hour < 12 else "pm"
    return f"{now:%B} {now.day}, {now.year} {hour}:{now.minute:02d}{suffix}"
