"""The MCP manager: owns servers, discovers their catalogs, holds call permissions.

It is the :class:`~tavern_agent.tools.catalog.McpCatalog` port: ``catalog``
offers active servers' ``allow``/``ask`` tools from the cached discovery;
``invoke`` reloads the registration right before sending and refuses calls
to missing, paused or ``off`` tools without contacting the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp import MCPError, types
from mcp.client.session import ElicitationFnT
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR
from pydantic import ValidationError

from tavern_agent.core.closing import AsyncClosing
from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId, ToolKind
from tavern_agent.mcp.approval import (
    ApprovalRequest,
    Approver,
    policy_approver,
    schema_defaults,
)
from tavern_agent.mcp.connections import (
    MALFORMED_PREFIX,
    ConnectError,
    Connection,
    ConnectionPool,
    describe_error,
)
from tavern_agent.mcp.deadlines import Deadlines
from tavern_agent.mcp.logs import capture_sdk_logs
from tavern_agent.mcp.registrations import (
    DiscoveredCatalog,
    DiscoveredTool,
    Registration,
    RegistrationError,
    RegistrationStore,
    SkippedTool,
    validate_tool,
)
from tavern_agent.mcp.results import convert_result
from tavern_agent.tools.catalog import ExternalReceipt
from tavern_agent.tools.context import CallContext, ResultFiles
from tavern_agent.tools.texts import outside_text

log = logging.getLogger(__name__)
MAX_ARGUMENT_BYTES = 256 * 1024
MAX_LIST_PAGES = 1_000
DESCRIPTION_CHARS = 2_000


def _size_bound(value: Any, budget: int) -> int:
    """An upper bound of ``value``'s UTF-8 JSON size, stopping once it passes ``budget``.

    Much cheaper than serializing for the small arguments of most calls: a
    character takes at most 6 bytes in JSON (a ``\\uXXXX`` escape).
    """
    if isinstance(value, str):
        return 6 * len(value) + 2
    if isinstance(value, dict):
        total = 2
        for key, item in value.items():
            total += 6 * len(str(key)) + 4 + _size_bound(item, budget - total)
            if total > budget:
                break
        return total
    if isinstance(value, list | tuple):
        total = 2
        for item in value:
            total += _size_bound(item, budget - total) + 2
            if total > budget:
                break
        return total
    return 32  # numbers, booleans, null


def oversize(arguments: dict[str, Any]) -> int | None:
    """The UTF-8 JSON size of ``arguments`` if it is over the limit, else ``None``.

    Serializes only when a cheap bound says the limit could be passed.
    """
    if _size_bound(arguments, MAX_ARGUMENT_BYTES) <= MAX_ARGUMENT_BYTES:
        return None
    size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return size if size > MAX_ARGUMENT_BYTES else None


def _connection_lost(exc: MCPError, conn: Connection) -> bool:
    """Whether the SDK itself reported the connection gone, rather than the server
    answering with an error that happens to use the same code (-32000 is also the
    generic JSON-RPC server error). The SDK's own report has no data and comes
    when the transport has ended or its writes fail."""
    if exc.error.code != CONNECTION_CLOSED:
        return False
    if not conn.alive:
        return True
    return exc.error.message == "Connection closed" and exc.error.data is None


class McpManager(AsyncClosing):
    """MCP servers under one data root, usable as the catalog's MCP source."""

    def __init__(
        self,
        data_dir: Path,
        *,
        approver: Approver | None = None,
        result_files: ResultFiles | None = None,
    ) -> None:
        self.store = RegistrationStore(data_dir)
        self.approver = approver or policy_approver("decline")
        self.result_files = result_files
        self.pool = ConnectionPool(self.store.log_path, self.store.oauth_path)
        capture_sdk_logs(self.store.logs_dir / "sdk.log")
        self.pool.on_notification = self._notified
        self.pool.elicitation = self._elicitation
        self._refreshes: set[asyncio.Task[None]] = set()
        self._reported: set[str] = set()  # broken registration diagnostics already logged
        self._deadlines = Deadlines()

    async def aclose(self) -> None:
        """Close every connection (stdio servers are stopped)."""
        for task in list(self._refreshes):
            task.cancel()
        await self._deadlines.aclose()
        await self.pool.close_all()

    # ------------------------------------------------------------ discovery

    async def discover(self, ref: str) -> DiscoveredCatalog:
        """Full paginated ``tools/list``, validated, cached with its time. New tools stay off."""
        reg = self.store.find(ref)
        if reg.state != "active":
            raise RegistrationError(f"{reg.id} is paused; resume it before discovery")
        try:
            conn = self.pool.ready(reg) or await self.pool.get(reg)
        except ConnectError as exc:
            if exc.login_needed:
                raise RegistrationError(
                    f"{reg.id}: the server needs a login; run `tavern-agent mcp login {reg.id}`"
                ) from None
            raise RegistrationError(f"{reg.id}: could not connect: {exc}") from None
        try:
            return await self._list_and_store(reg, conn)
        except RegistrationError:
            raise
        except Exception as exc:  # the server's error or a lost connection: a message
            if conn.login_needed:
                raise RegistrationError(
                    f"{reg.id}: the server needs a login; run `tavern-agent mcp login {reg.id}`"
                ) from None
            raise RegistrationError(f"{reg.id}: tools/list failed: {describe_error(exc)}") from None

    async def _list_and_store(self, reg: Registration, conn: Connection) -> DiscoveredCatalog:
        assert conn.session is not None
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await conn.session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            raise RegistrationError(
                f"{reg.id}: tools/list did not end after {MAX_LIST_PAGES} pages"
            )
        tools: list[DiscoveredTool] = []
        skipped: list[SkippedTool] = []
        seen: set[str] = set()
        for tool in listed:
            reason = validate_tool(tool.name, tool.input_schema)
            if reason is None and tool.name in seen:
                reason = "listed twice"
            if reason is not None:
                skipped.append(SkippedTool(name=str(tool.name)[:200], reason=reason))
                continue
            seen.add(tool.name)
            tools.append(
                DiscoveredTool(
                    name=tool.name,
                    description=(tool.description or tool.title or "")[:DESCRIPTION_CHARS],
                    input_schema=dict(tool.input_schema),
                    title=tool.title,
                )
            )
        found = DiscoveredCatalog(
            discovered_at=time.time(), tools=tuple(tools), skipped=tuple(skipped)
        )
        self.store.save_catalog(reg.id, found)
        return found

    def _notified(self, reg_id: str, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            task = asyncio.get_running_loop().create_task(self._refresh(reg_id))
            self._refreshes.add(task)
            task.add_done_callback(self._refreshes.discard)

    async def _refresh(self, reg_id: str) -> None:
        reg = self.store.get(reg_id)
        conn = self.pool.current(reg_id)
        if reg is None or conn is None:
            return
        try:
            await self._list_and_store(reg, conn)
        except Exception:  # a failed refresh keeps the old cache
            log.warning("mcp %s: refresh after tools/list_changed failed", reg_id, exc_info=True)

    # ------------------------------------------------------------ elicitation

    def _elicitation(self, reg_id: str) -> ElicitationFnT:
        async def answer(
            context: Any, params: types.ElicitRequestParams
        ) -> types.ElicitResult | types.ErrorData:
            return await self.elicit(reg_id, params)

        return answer

    async def elicit(self, reg_id: str, params: types.ElicitRequestParams) -> types.ElicitResult:
        """A server's request for input, put to the same approver as ``ask`` calls.

        Form mode proposes the schema's defaults; an approver that says yes may
        have edited them, and defaults still fill any field left out. URL mode
        asks whether the person opened the URL. Without a yes: ``decline``.
        """
        reg = self.store.get(reg_id)
        server = reg.display_name if reg is not None else reg_id
        if isinstance(params, types.ElicitRequestURLParams):
            request = ApprovalRequest(
                reg_id, server, "elicitation", server, {"url": params.url},
                kind="elicitation", message=f"{params.message} Open: {params.url}",
            )  # fmt: skip
            accepted = await self.approver(request)
            return types.ElicitResult(action="accept" if accepted else "decline")
        schema = dict(params.requested_schema)
        defaults = schema_defaults(schema)
        request = ApprovalRequest(
            reg_id, server, "elicitation", server, dict(defaults),
            kind="elicitation", message=params.message, schema=schema,
        )  # fmt: skip
        if not await self.approver(request):
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=defaults | request.arguments)

    # ------------------------------------------------------------ catalog port

    def catalog(self, scene: Scene) -> Sequence[ToolDescriptor]:
        """The tools offered in ``scene``: each active registration's discovered tools whose
        permission is not ``off`` (broken registration files are logged and skipped)."""
        found: list[ToolDescriptor] = []
        regs, broken = self.store.scan()
        for bad in broken:
            self._report(bad.diagnostic)
        for reg in regs:
            if reg.state != "active":
                continue
            cached = self.store.catalog(reg.id)
            if cached is None:
                continue
            for tool in cached.tools:
                if reg.permission(tool.name) == "off":
                    continue
                found.append(
                    ToolDescriptor(
                        tool_id=ToolId.mcp(reg.id, tool.name),
                        description=tool.description,
                        parameters=tool.input_schema,
                        label=reg.display_name,
                    )
                )
        return found

    def _report(self, diagnostic: str) -> None:
        """Log a broken registration once per manager, so a listing is not flooded."""
        if diagnostic not in self._reported:
            self._reported.add(diagnostic)
            log.warning("%s", diagnostic)

    def availability(self, tool_id: ToolId) -> str | None:
        """Always ``None``: permission is checked in :meth:`invoke`, right before sending,
        so a refused call reaches the model as ``mcp.permission_denied``."""
        return None

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Call an MCP tool: reload the registration and check the permission right
        before sending (asking the approver for ``ask``), then convert the server's
        result. Every failure is a result saying whether the call was sent."""
        if tool_id.kind is not ToolKind.MCP:
            raise LookupError(f"{tool_id} is not an MCP tool")
        name = context.snapshot.name_of(tool_id) or tool_id.name
        not_sent = "The call was not sent"
        # The permission check, right before sending: reload the registration.
        try:
            reg = self.store.get(tool_id.source)
        except RegistrationError as exc:
            self._report(str(exc))
            return ExternalReceipt.failure(
                ErrorCode.MCP_SERVER_UNAVAILABLE,
                f"{name} is unavailable: the registration file of its MCP server is broken. "
                f"{not_sent}; do without it.",
            )
        if reg is None:
            return ExternalReceipt.failure(
                ErrorCode.MCP_PERMISSION_DENIED,
                f"{name} is gone: its MCP server was removed. {not_sent}; do without it.",
            )
        if reg.state != "active":
            return ExternalReceipt.failure(
                ErrorCode.MCP_PERMISSION_DENIED,
                f"{name} is paused (MCP server {reg.display_name}). {not_sent}; do without it.",
            )
        permission = reg.permission(tool_id.name)
        if permission == "off":
            return ExternalReceipt.failure(
                ErrorCode.MCP_PERMISSION_DENIED,
                f"{name} has been switched off. {not_sent}; do without it.",
            )
        size = oversize(arguments)
        if size is not None:
            return ExternalReceipt.failure(
                ErrorCode.MCP_ARGUMENTS_TOO_LARGE,
                f"Arguments for {name} are {size / 1024:,.0f} KiB; the limit is 256 KiB. "
                f"{not_sent}; send less, e.g. a path instead of file contents.",
            )
        if permission == "ask":
            request = ApprovalRequest(reg.id, reg.display_name, tool_id.name, name, arguments)
            if not await self.approver(request):
                return ExternalReceipt.failure(
                    ErrorCode.MCP_PERMISSION_DENIED,
                    f"The person declined this call to {name}. {not_sent}; "
                    "do not repeat it unless they ask.",
                )
        try:
            conn = self.pool.ready(reg) or await self.pool.get(reg)
        except ConnectError as exc:
            if exc.login_needed:
                return self._login_required(reg, name)
            return ExternalReceipt.failure(
                ErrorCode.MCP_SERVER_UNAVAILABLE,
                f"{name} could not reach its MCP server ({outside_text(str(exc))}). {not_sent}; "
                "try again later or do without it.",
            )
        return await self._call(conn, reg, tool_id.name, name, arguments, context)

    async def _call(
        self,
        conn: Connection,
        reg: Registration,
        tool: str,
        name: str,
        arguments: dict[str, Any],
        context: CallContext,
    ) -> ExternalReceipt:
        assert conn.session is not None
        seconds = reg.timeouts.call_seconds
        unknown = "It may have run. Check the current state before repeating it; it is not retried."
        try:
            # One watchdog for every call's timeout: a timer per call (the SDK's
            # read_timeout_seconds, or asyncio.timeout) is measurable next to a
            # local round trip.
            with self._deadlines.within(seconds):
                result = await conn.session.call_tool(tool, arguments)
        except MCPError as exc:
            if conn.login_needed:
                return self._login_required(reg, name)
            if _connection_lost(exc, conn):
                conn.mark_dead()
                return self._unknown(name, "lost its server connection mid-call", unknown, exc)
            if exc.error.code == PARSE_ERROR and exc.error.message.startswith(MALFORMED_PREFIX):
                return ExternalReceipt.failure(
                    ErrorCode.MCP_UNSUPPORTED_RESPONSE,
                    f"{name} sent a reply that is not a valid tool result "
                    f"({exc.error.message}). It may have run; check before repeating it.",
                    raw=exc.error.model_dump(mode="json"),
                )
            return ExternalReceipt.failure(
                ErrorCode.MCP_SERVER_ERROR,
                f"{name} failed on the MCP server: {exc.error.message} "
                f"(JSON-RPC error {exc.error.code}).",
                raw=exc.error.model_dump(mode="json"),
            )
        except TimeoutError as exc:
            if conn.login_needed:
                return self._login_required(reg, name)
            return self._unknown(name, f"got no answer within {seconds:g} s", unknown, exc)
        except (ValidationError, RuntimeError) as exc:
            detail = outside_text(str(exc)) if str(exc) else type(exc).__name__
            return ExternalReceipt.failure(
                ErrorCode.MCP_UNSUPPORTED_RESPONSE,
                f"{name} sent a reply that is not a valid tool result ({detail}).",
            )
        except Exception as exc:  # transport failures after sending: the outcome is unknown
            if conn.login_needed:
                return self._login_required(reg, name)
            log.warning("mcp %s: call to %s failed", reg.id, tool, exc_info=True)
            conn.mark_dead()
            return self._unknown(name, "lost its server connection mid-call", unknown, exc)
        self.pool.note_success(reg.id)
        return convert_result(
            result,
            context,
            context.result_files or self.result_files,
            server=reg.display_name,
            tool=name,
        )

    def _login_required(self, reg: Registration, name: str) -> ExternalReceipt:
        return ExternalReceipt.failure(
            ErrorCode.MCP_LOGIN_REQUIRED,
            f"{name} is unavailable: its MCP server {reg.display_name} needs a login "
            "(none yet, the token was revoked, or the tool needs more permissions). "
            "The call was not sent; ask the person to run "
            f"`tavern-agent mcp login {reg.id}`, or do without it.",
        )

    def _unknown(self, name: str, what: str, advice: str, exc: BaseException) -> ExternalReceipt:
        return ExternalReceipt.failure(
            ErrorCode.MCP_CALL_OUTCOME_UNKNOWN,
            f"{name} {what}. {advice}",
            raw={"exception": type(exc).__name__, "message": str(exc)},
        )
