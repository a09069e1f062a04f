"""Reaching a running extension host from another process, and combining sources.

``tavern-agent serve`` writes ``<data>/extensions/host.json`` (its URL and
pid) and ``<data>/extensions/token`` (owner-only). :class:`RemoteExtensionTools`
reads both, connects to the runtime channel, keeps the catalog the host
pushes, and sends calls; it is the ``ExtensionTools`` port for a process that
is not the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.extensions.protocol import (
    RUNTIME_PATH,
    SUBPROTOCOL,
    TOKEN_PREFIX,
    UNKNOWN,
    CallMeta,
    descriptor_from_json,
    receipt_from_json,
)
from tavern_agent.extensions.python import unavailable
from tavern_agent.fsutil import atomic_write
from tavern_agent.tools.catalog import (
    GONE,
    ExtensionTools,
    ExternalReceipt,
    RegisteredTools,
)
from tavern_agent.tools.context import CallContext

log = logging.getLogger(__name__)


class HostUnavailable(ConnectionError):
    """No extension host answers for this data root."""


@dataclass(frozen=True, slots=True)
class HostFiles:
    """The files a running host leaves under the data root."""

    data_dir: Path

    @property
    def folder(self) -> Path:
        """The folder of the host's files under the data folder."""
        return self.data_dir / "extensions"

    @property
    def token_path(self) -> Path:
        """The file holding the host's access token (owner-only)."""
        return self.folder / "token"

    @property
    def info_path(self) -> Path:
        """The file naming the running host's URL and process id."""
        return self.folder / "host.json"

    def write(self, url: str, token: str) -> None:
        """Announce a running host: its token (owner-only) and its URL and pid."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(self.token_path, token.encode() + b"\n", mode=0o600)  # owner-only
        info = {"url": url, "pid": os.getpid()}
        atomic_write(self.info_path, json.dumps(info).encode() + b"\n")

    def clear(self) -> None:
        """Remove the host's files when it stops."""
        for path in (self.info_path, self.token_path):
            path.unlink(missing_ok=True)

    def read(self) -> tuple[str, str] | None:
        """``(url, token)`` of the host last started here, or ``None``."""
        try:
            info = json.loads(self.info_path.read_text(encoding="utf-8"))
            token = self.token_path.read_text(encoding="utf-8").strip()
        except (OSError, ValueError):
            return None
        url = info.get("url") if isinstance(info, dict) else None
        return (url, token) if isinstance(url, str) and token else None


class _Entry:
    __slots__ = ("descriptor", "enabled", "origin")

    def __init__(self, descriptor: ToolDescriptor, enabled: bool, origin: str) -> None:
        self.descriptor = descriptor
        self.enabled = enabled
        self.origin = origin


class RemoteExtensionTools(RegisteredTools[_Entry]):
    """The extension tools of a host in another process, through its runtime channel."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.tools: dict[ToolId, _Entry] = {}
        self._next = 0
        self._waiting: dict[int, asyncio.Future[ExternalReceipt]] = {}
        self._first_catalog: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url: str, token: str) -> RemoteExtensionTools:
        """Connect to the host at ``url`` (http://127.0.0.1:PORT) and wait for its catalog."""
        ws_url = url.replace("http://", "ws://", 1).rstrip("/") + RUNTIME_PATH
        try:
            connection = await connect(
                ws_url,
                subprotocols=[SUBPROTOCOL, Subprotocol(TOKEN_PREFIX + token)],
                max_size=None,
                compression=None,
                open_timeout=5,
            )
        except (OSError, InvalidHandshake, InvalidStatus, TimeoutError) as exc:
            raise HostUnavailable(f"no extension host at {url}: {exc}") from None
        remote = cls(connection)
        await remote._first_catalog
        return remote

    @classmethod
    async def from_data_dir(cls, data_dir: Path) -> RemoteExtensionTools | None:
        """The host ``tavern-agent serve`` runs for ``data_dir``, or ``None`` if none answers."""
        found = HostFiles(data_dir).read()
        if found is None:
            return None
        try:
            return await cls.connect(*found)
        except HostUnavailable as exc:
            log.info("%s", exc)
            return None

    async def aclose(self) -> None:
        """Close the connection to the host and stop reading from it."""
        await self.connection.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        try:
            async for raw in self.connection:
                message = json.loads(raw)
                if message.get("type") == "catalog":
                    self._set_catalog(message["tools"])
                elif message.get("type") == "receipt":
                    future = self._waiting.pop(message["id"], None)
                    if future is not None and not future.done():
                        future.set_result(receipt_from_json(message["receipt"]))
        except ConnectionClosed:
            pass
        finally:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(HostUnavailable("the extension host closed"))
            self._waiting.clear()
            if not self._first_catalog.done():
                self._first_catalog.set_exception(HostUnavailable("the extension host closed"))

    def _set_catalog(self, tools: list[dict[str, Any]]) -> None:
        self.tools = {}
        for item in tools:
            descriptor = descriptor_from_json(item)
            self.tools[descriptor.tool_id] = _Entry(descriptor, item["enabled"], item["source"])
        if not self._first_catalog.done():
            self._first_catalog.set_result(None)

    # ------------------------------------------------------------ the port

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Ask the host to call a page's tool and wait for its receipt; a cancellation
        is passed on to the host, a lost connection comes back as an error receipt."""
        meta = CallMeta.of(tool_id, context)
        self._next += 1
        request_id = self._next
        future: asyncio.Future[ExternalReceipt] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        ctx = meta.to_json() | {"name": meta.name}
        message = {
            "type": "invoke",
            "id": request_id,
            "toolId": str(tool_id),
            "arguments": arguments,
            "context": ctx,
        }
        try:
            await self.connection.send(json.dumps(message, ensure_ascii=False))
        except ConnectionClosed:
            self._waiting.pop(request_id, None)
            return ExternalReceipt.failure(
                ErrorCode.EXTENSION_HOST_UNAVAILABLE,
                f"{meta.name} could not reach the extension host; the call was not sent.",
            )
        waiter: asyncio.Future[Any] = asyncio.ensure_future(context.cancelled.wait())
        both: set[asyncio.Future[Any]] = {future, waiter}
        try:
            done, _ = await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            if future not in done:  # cancelled: tell the host, then take its receipt
                with contextlib.suppress(ConnectionClosed):
                    await self.connection.send(json.dumps({"type": "cancel", "id": request_id}))
            return await future
        except HostUnavailable:
            return ExternalReceipt.failure(
                ErrorCode.EXTENSION_TOOL_DISCONNECTED,
                f"{meta.name} lost the extension host mid-call. {UNKNOWN}",
            )
        finally:
            waiter.cancel()
            self._waiting.pop(request_id, None)


class OriginAware(ExtensionTools, Protocol):
    """An extension tool source that can say who registered each tool."""

    def origin(self, tool_id: ToolId) -> str | None:
        """Who registered the tool (a module or a page), if the source knows it."""


class CombinedExtensionTools:
    """Several extension sources as one port; the first source to know a ToolId owns it."""

    def __init__(self, *sources: OriginAware) -> None:
        self.sources = sources

    def _owner(self, tool_id: ToolId) -> OriginAware | None:
        for source in self.sources:
            if source.origin(tool_id) is not None:
                return source
        return None

    def catalog(self, scene: Scene) -> Sequence[ToolDescriptor]:
        """The tools of every source for ``scene``; the first source to offer a ToolId wins."""
        seen: set[ToolId] = set()
        found: list[ToolDescriptor] = []
        for source in self.sources:
            for descriptor in source.catalog(scene):
                if descriptor.tool_id not in seen:
                    seen.add(descriptor.tool_id)
                    found.append(descriptor)
        return found

    def availability(self, tool_id: ToolId) -> str | None:
        """Why the tool cannot be called, asked of the
        source that offers it (``GONE`` when none does)."""
        owner = self._owner(tool_id)
        return GONE if owner is None else owner.availability(tool_id)

    def origin(self, tool_id: ToolId) -> str | None:
        """Who registered the tool, asked of the source that offers it."""
        owner = self._owner(tool_id)
        return None if owner is None else owner.origin(tool_id)

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Call the tool through the source that offers it (unavailable when none does)."""
        owner = self._owner(tool_id)
        if owner is None:
            return unavailable(context.model_name(str(tool_id), tool_id.name))
        return await owner.invoke(tool_id, arguments, context)
