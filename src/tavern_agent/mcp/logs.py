"""Where MCP diagnostics go: capped, rotated log files under ``<data>/mcp/logs``.

A stdio server's stderr and the MCP SDK's own log records (parse errors with
tracebacks, transport failures) are written here and never to the terminal.
Each log keeps at most ``LOG_CAP_BYTES`` in the current file plus one rotated
``.1`` file, whatever a server prints.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import threading
from pathlib import Path
from typing import IO, TextIO, cast

LOG_CAP_BYTES = 1024 * 1024
SDK_LOGGER = "mcp"
_CHUNK = 64 * 1024


class CappedLog:
    """An append-only log file that rotates to ``<name>.1`` when it passes the cap."""

    def __init__(self, path: Path, cap: int = LOG_CAP_BYTES) -> None:
        self.path = path
        self.cap = cap
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 (closed in close())
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        """Append ``data``, rotating the file whenever it reaches the cap."""
        while data:
            room = self.cap - self._size
            if room <= 0:
                self._rotate()
                continue
            part, data = data[:room], data[room:]
            self._file.write(part)
            self._size += len(part)
        self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = open(self.path, "ab")  # noqa: SIM115
        self._size = 0

    def close(self) -> None:
        """Close the file."""
        self._file.close()


class StderrPipe:
    """A pipe whose write end a server process gets as stderr; a thread copies what
    arrives into a :class:`CappedLog`, so a flood never grows the file past the cap."""

    def __init__(self, path: Path, header: str) -> None:
        self._log = CappedLog(path)
        self._log.write(header.encode())
        read_fd, write_fd = os.pipe()
        self.writer = cast(TextIO, os.fdopen(write_fd, "w", encoding="utf-8"))
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._thread = threading.Thread(target=self._copy, name=f"mcp-stderr-{path.stem}")
        self._thread.daemon = True
        self._thread.start()

    def _copy(self) -> None:
        try:
            while chunk := self._reader.read(_CHUNK):
                self._log.write(chunk)
        finally:
            self._reader.close()
            self._log.close()

    def close(self) -> None:
        """Close our write end; the thread ends once the server's copy is closed too."""
        self.writer.close()


class _SdkLogHandler(logging.handlers.RotatingFileHandler):
    """Marks the handler this module installed, so it is installed only once."""


def capture_sdk_logs(path: Path) -> None:
    """Send the MCP SDK's log records to ``path`` (capped, rotated) instead of stderr.

    The SDK logs a full traceback for every line a server prints that is not
    JSON-RPC; those belong in a log file, not in the CLI's output.
    """
    logger = logging.getLogger(SDK_LOGGER)
    for handler in logger.handlers:
        if isinstance(handler, _SdkLogHandler):
            if Path(handler.baseFilename) == path.resolve():
                return
            logger.removeHandler(handler)
            handler.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _SdkLogHandler(path, maxBytes=LOG_CAP_BYTES, backupCount=1, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
