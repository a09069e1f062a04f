"""Python extension tools: plain functions registered with ``registry.tool(...)``.

::

    from tavern_agent.extensions import registry

    @registry.tool(extension_id="weather", name="forecast", description="Forecast for a city.")
    def forecast(city: str, days: int = 1) -> dict[str, object]:
        ...

The parameter schema comes from the type hints (or ``parameters=`` gives it
explicitly). A parameter annotated :class:`ExtensionContext` receives the
call's identities, scene target and cancellation signal instead of an
argument. The return value must be plain JSON; an exception becomes an error
result with its message. Sync functions run on the event loop, so they
should be quick; slow work belongs in an ``async def``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import queue
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, TypeVar, Unpack, get_args, get_type_hints

from pydantic import ConfigDict, ValidationError, create_model

from tavern_agent.core.descriptors import Scene, ToolDescriptor
from tavern_agent.core.errors import ErrorCode
from tavern_agent.core.ids import ToolId
from tavern_agent.tools.catalog import ExternalReceipt, RegisteredTools
from tavern_agent.tools.context import CallContext
from tavern_agent.tools.texts import OUTSIDE_FAILURE_STEP, exception_text

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT = 60.0  # seconds, as for a page's tool
OUTCOME_UNKNOWN = "It may have run. Check the current state before repeating it."

F = TypeVar("F", bound=Callable[..., Any])
_SCHEMA_NOISE = ("title",)


class AlreadyRegistered(ValueError):
    """A registration named a ToolId that exists already (``extension.tool_already_registered``)."""

    code = ErrorCode.EXTENSION_TOOL_ALREADY_REGISTERED


@dataclass(frozen=True, slots=True)
class ExtensionContext:
    """What an extension function may know about its call.

    ``target`` is ``{"kind": "chat"}`` or ``{"kind": "session"}`` plus the run's
    ids; ``cancelled`` is set when the run is cancelled.
    """

    run_id: str
    invocation_id: str
    call_id: str
    target: Mapping[str, str]
    cancelled: asyncio.Event

    @classmethod
    def of(cls, ctx: CallContext) -> ExtensionContext:
        """The context an extension function gets for the call ``ctx``."""
        return cls(ctx.run_id, ctx.invocation_id, ctx.call_id, target_of(ctx), ctx.cancelled)


def target_of(ctx: CallContext) -> dict[str, str]:
    """The scene target sent to an extension: the scene kind and its ids.

    A chat target names the chat twice over: ``stableChatId`` stays the same
    when the file is renamed, ``chatRef`` is the chat file's name as the user
    sees it.
    """
    if ctx.scene is not Scene.CHAT:
        return {"kind": "session", "sessionId": ctx.run_id}
    target = {"kind": "chat", "runId": ctx.run_id}
    if ctx.chat is not None:
        target |= {"stableChatId": ctx.chat.input.stable_chat_id, "chatRef": ctx.chat.input.title}
    return target


def receipt_for_value(value: Any, name: str | Callable[[], str]) -> ExternalReceipt:
    """A returned value as a receipt: plain JSON or an error naming the type."""
    try:
        text = value if isinstance(value, str) else _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        if not isinstance(name, str):
            name = name()
        return ExternalReceipt.failure(
            ErrorCode.EXTENSION_INVALID_RESULT,
            f"{name} returned a {_type_name(value)}, which is not plain JSON "
            f"({exc}). The extension must be fixed; do not retry.",
            {"returnedType": _type_name(value)},
        )
    return ExternalReceipt(content=text, structured=value, raw=value)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _type_name(value: Any) -> str:
    return type(value).__qualname__


def error_receipt(name: str, exc: BaseException) -> ExternalReceipt:
    """A function's exception as a result: a short, path-free text for the model.

    The exception's full text and traceback stay in ``structured``, which the
    run records with the call's result but never sends to the model.
    """
    full = {
        "exception": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }
    text = f"{name} failed: {exception_text(exc, with_type=False)}. {OUTSIDE_FAILURE_STEP}"
    return ExternalReceipt.failure(ErrorCode.EXTENSION_TOOL_ERROR, text, full, structured=full)


@dataclass(slots=True)
class PythonTool:
    """One registered function and how to call it."""

    descriptor: ToolDescriptor
    function: Callable[..., Any]
    module: str
    context_param: str | None
    arguments_model: Any  # a pydantic model class, or None for an explicit schema
    is_async: bool
    enabled: bool = True

    @property
    def origin(self) -> str:
        """The module that registered the function."""
        return f"module {self.module}"

    def model_name(self, ctx: CallContext) -> str:
        """The name the model called this tool by (its snapshot's name for it)."""
        tool_id = self.descriptor.tool_id
        return ctx.snapshot.name_of(tool_id) or tool_id.name

    async def _run(self, kwargs: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.function(**kwargs)
        # A plain function runs on a worker thread: a slow or hanging one is then
        # bound by the time limit like a page's tool, and cannot stall the run's
        # event loop (nor keep the process alive at exit: the workers are daemons).
        return await _WORKERS.run(lambda: self.function(**kwargs))

    async def call(
        self, arguments: dict[str, Any], ctx: CallContext, timeout: float = DEFAULT_TIMEOUT
    ) -> ExternalReceipt:
        """Run the function with validated arguments within ``timeout`` seconds; bad
        arguments, an exception, a timeout or a cancellation come back as an error receipt."""
        kwargs: dict[str, Any]
        if self.arguments_model is not None:
            try:
                parsed = self.arguments_model.model_validate(arguments)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "arguments"
                name = self.model_name(ctx)
                return ExternalReceipt.failure(
                    ErrorCode.TOOL_INVALID_ARGUMENTS,
                    f"Arguments for {name} do not fit: {where}: {first['msg']}.",
                )
            kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        else:
            kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = ExtensionContext.of(ctx)
        name = self.model_name(ctx)
        try:
            value = await _bounded(self._run(kwargs), ctx.cancelled, timeout)
        except TimeoutError:
            return ExternalReceipt.failure(
                ErrorCode.EXTENSION_TOOL_TIMEOUT,
                f"{name} got no answer within {timeout:g} s. {OUTCOME_UNKNOWN}",
            )
        except _Cancelled:
            return ExternalReceipt.failure(
                ErrorCode.EXTENSION_TOOL_CANCELLED,
                f"{name} was cancelled with the run. {OUTCOME_UNKNOWN}",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the function's own failure is a result, never a crash
            return error_receipt(name, exc)
        return receipt_for_value(value, name)


class _Workers:
    """Daemon threads that run plain extension functions, reused from call to call.

    A thread stays busy while its function runs, however long; a call that
    finds no idle thread starts a new one. Reusing threads keeps a quick
    function's cost to two thread hops instead of a thread start.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    async def run(self, function: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def job() -> None:
            try:
                value, error = function(), None
            except BaseException as exc:  # handed to the awaiting call as is
                value, error = None, exc
            # The caller's loop may be gone (it stopped waiting at its time limit and
            # then ended); nobody wants the answer any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, value, error)

        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        if start:
            threading.Thread(target=self._work, name="tavern-agent-extension", daemon=True).start()
        self._jobs.put(job)
        return await future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            job()
            with self._lock:
                self._idle += 1


_WORKERS = _Workers()


class _Cancelled(Exception):
    """The run's cancel signal was set while the function ran."""


def _settle(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():  # the call timed out or was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


async def _bounded(work: Awaitable[Any], cancelled: asyncio.Event, timeout: float) -> Any:
    """Await ``work`` until it ends, ``timeout`` passes or ``cancelled`` is set."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(cancelled.wait())
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            return task.result()
        raise _Cancelled() if waiter in done else TimeoutError()
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()


class ToolSpec(TypedDict, total=False):
    """What :meth:`ExtensionRegistry.register` takes besides the function."""

    extension_id: Required[str]
    name: Required[str]
    description: Required[str]
    scenes: Iterable[Scene | str]
    parameters: Mapping[str, Any] | None
    enabled: bool


@dataclass
class ExtensionRegistry(RegisteredTools[PythonTool]):
    """Python-registered extension tools: the :class:`ExtensionTools` port for this process.

    ``call_timeout`` bounds each call in seconds, as the page host does; a
    call past it, or cut by the run's cancellation, gets a result saying its
    outcome is unknown.
    """

    tools: dict[ToolId, PythonTool] = field(default_factory=dict)
    call_timeout: float = DEFAULT_TIMEOUT

    def tool(self, **spec: Unpack[ToolSpec]) -> Callable[[F], F]:
        """Register the decorated function as ``extension/<extension_id>:<name>``
        (``spec``: the keywords of :meth:`register`)."""

        def decorate(function: F) -> F:
            self.register(function, **spec)
            return function

        return decorate

    def register(
        self,
        function: Callable[..., Any],
        *,
        extension_id: str,
        name: str,
        description: str,
        scenes: Iterable[Scene | str] = (Scene.CHAT, Scene.SESSION),
        parameters: Mapping[str, Any] | None = None,
        enabled: bool = True,
    ) -> ToolId:
        """Register ``function`` as the tool ``extension/<extension_id>:<name>``
        and return its ToolId; raises ``AlreadyRegistered`` if that id is taken."""
        tool_id = ToolId.extension(extension_id, name)
        if tool_id in self.tools:
            raise AlreadyRegistered(
                f"{tool_id} is registered already (by {self.tools[tool_id].module})"
            )
        context_param, model, schema = _signature_schema(function, tool_id)
        if parameters is not None:
            schema, model = dict(parameters), None
        descriptor = ToolDescriptor(
            tool_id=tool_id,
            description=description,
            parameters=schema,
            scenes=frozenset(Scene(s) for s in scenes),
            label=extension_id,
            name_hint=name,
        )
        module = getattr(function, "__module__", None) or "?"
        self.tools[tool_id] = PythonTool(
            descriptor,
            function,
            module,
            context_param,
            model,
            inspect.iscoroutinefunction(function),
            enabled,
        )
        return tool_id

    def unregister(self, tool_id: ToolId) -> None:
        """Remove a tool; a later call to it is answered as unavailable."""
        self.tools.pop(tool_id, None)

    def set_enabled(self, tool_id: ToolId, enabled: bool) -> None:
        """Switch a registered tool on or off; raises ``KeyError`` for an unknown one."""
        self.tools[tool_id].enabled = enabled

    # ------------------------------------------------------------ the port

    async def invoke(
        self, tool_id: ToolId, arguments: dict[str, Any], context: CallContext
    ) -> ExternalReceipt:
        """Call the registered function; a missing or disabled tool is answered as unavailable."""
        found = self.tools.get(tool_id)
        if found is None or not found.enabled:
            name = context.model_name(str(tool_id), tool_id.name)
            return unavailable(name)
        return await found.call(arguments, context, self.call_timeout)


def unavailable(name: str) -> ExternalReceipt:
    """The reply for a tool that vanished or was disabled since the snapshot."""
    return ExternalReceipt.failure(
        ErrorCode.TOOL_UNAVAILABLE,
        f"{name} is unavailable (removed or disabled); no action was taken.",
    )


def _signature_schema(
    function: Callable[..., Any], tool_id: ToolId
) -> tuple[str | None, Any, dict[str, Any]]:
    """The context parameter's name, a pydantic model of the rest, and its JSON Schema."""
    signature = inspect.signature(function)
    try:
        hints = get_type_hints(function)
    except Exception as exc:
        raise TypeError(f"{tool_id}: cannot read the type hints of {function!r}: {exc}") from exc
    context_param: str | None = None
    fields: dict[str, Any] = {}
    for pname, param in signature.parameters.items():
        hint = hints.get(pname, Any)
        if hint is ExtensionContext or ExtensionContext in get_args(hint):
            context_param = pname
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"{tool_id}: parameter {pname!r} must be an ordinary named parameter "
                "(or give parameters= explicitly)"
            )
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hint, default)
    model = create_model(
        f"Args_{function.__name__}",
        __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
        **fields,
    )
    schema = _clean(model.model_json_schema())
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return context_param, model, schema


def _clean(node: Any) -> Any:
    """Drop pydantic's generated titles (model noise, never useful to a model)."""
    if isinstance(node, dict):
        return {
            k: (_clean(v) if k != "properties" else {pk: _clean(pv) for pk, pv in v.items()})
            for k, v in node.items()
            if k not in _SCHEMA_NOISE or not isinstance(v, str)
        }
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


registry = ExtensionRegistry()
"""The process-wide registry that ``tavern-agent --ext MODULE`` modules register on."""
