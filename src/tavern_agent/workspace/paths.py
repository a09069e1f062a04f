"""Logical workspace paths: the only form in which a model names a file.

A logical path is relative, ``/``-separated, non-empty UTF-8. After
normalisation (``./`` and repeated slashes dropped) it holds no ``..``, no
absolute or drive prefix, no NUL or control character, no backslash, no
percent-encoded separator, no segment ending in a dot or space, and nothing
that Unicode compatibility folding turns into one of those. A path that breaks
a rule is the model's mistake: :class:`InvalidPath`, reported as the
recoverable ``workspace.invalid_path``.
"""

from __future__ import annotations

import re
import unicodedata

MAX_PATH_BYTES = 1024
MAX_SEGMENT_BYTES = 255
# Characters that look like, or fold into, separators or dots.
_LOOKALIKES = frozenset("\\∕⁄／＼⧵﹨．。｡‥…")
_ENCODED = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")
# Absolute host paths: POSIX (two or more segments, so "/ 2" or "a/b" stay),
# file:// URLs, Windows drive and UNC paths.
_HOST_PATH = re.compile(
    r"file://\S+"
    r"|(?<![\w.~/-])[A-Za-z]:[\\/][^\s'\"<>|:]*"
    r"|\\\\[^\s'\"<>|]+"
    r"|(?<![\w.~:/-])(?:~)?/(?:[^\s/'\"<>|:;,()]+/)+[^\s/'\"<>|:;,()]*"
)


class InvalidPath(ValueError):
    """A logical path that breaks a rule; the message says which, for the model."""


def normalize(text: str, *, allow_root: bool = False) -> str:
    """The canonical form of a logical path, or :class:`InvalidPath`.

    With ``allow_root``, ``""``, ``"."`` and ``"./"`` mean the workspace root
    and give ``""``.
    """
    if not isinstance(text, str):
        raise InvalidPath("a path must be a string")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise InvalidPath(f"path is longer than {MAX_PATH_BYTES} bytes")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise InvalidPath("path holds a control character or NUL")
    if text.startswith("/"):
        raise InvalidPath("use a relative path such as output/main.md, not an absolute one")
    if _DRIVE.match(text):
        raise InvalidPath("drive prefixes like C: are not paths here")
    if _ENCODED.search(text):
        raise InvalidPath("percent-encoded dots, slashes or NUL are not allowed")
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if not segments:
        if allow_root:
            return ""
        raise InvalidPath("path is empty; name a file such as output/main.md")
    for segment in segments:
        _check_segment(segment)
    return "/".join(segments)


def _check_segment(segment: str) -> None:
    if segment == "..":
        raise InvalidPath("'..' is not allowed; paths stay inside the workspace")
    if any(c in _LOOKALIKES for c in segment):
        raise InvalidPath(f"{segment!r} holds a backslash or a look-alike of '/' or '.'")
    folded = unicodedata.normalize("NFKC", segment)
    if folded != segment and (".." in folded or "/" in folded or "\\" in folded):
        raise InvalidPath(f"{segment!r} folds to {folded!r}")
    if segment.endswith((".", " ")) or segment.startswith(" "):
        raise InvalidPath(f"segment {segment!r} starts with a space or ends with a dot or space")
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise InvalidPath(f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes")


def top(path: str) -> str:
    """The first segment of a normalised path (its root folder)."""
    return path.split("/", 1)[0]


def without_host_paths(text: str) -> str:
    """``text`` with every absolute host path replaced by ``<path>``."""
    return _HOST_PATH.sub("<path>", text)
