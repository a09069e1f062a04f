"""MCP server registrations and their discovered catalogs, as JSON files under the data root.

``<data>/mcp/registrations/<id>.json`` holds one server: id, display name,
transport (stdio or Streamable HTTP), state, per-tool permissions and timeouts.
``<data>/mcp/catalog/<id>.json`` holds the last full, validated ``tools/list``
with the time it was taken. A tool without a permission entry is ``off``.
Every write is atomic; reads are cached by file identity, so reloading a
registration right before a call costs one ``stat``.

A registration file that cannot be used (not JSON, a bad value, or keys from a
newer version of tavern-agent) is skipped, never rewritten: ``broken()`` names
each with its problem, and ``remove`` deletes it by file name.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from tavern_agent.core.ids import ToolId
from tavern_agent.fsutil import atomic_write

Permission = Literal["allow", "ask", "off"]
State = Literal["active", "paused"]
DEFAULT_CALL_SECONDS = 60.0
DEFAULT_CONNECT_SECONDS = 30.0
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # SEP-986, as the SDK checks it


class RegistrationError(ValueError):
    """A registration that cannot be stored or used as given."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class StdioTransport(_Model):
    """A server started as a local process, spoken to over its stdin and stdout."""

    type: Literal["stdio"] = "stdio"
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None


class HttpTransport(_Model):
    """Streamable HTTP. Only loopback addresses unless ``allow_remote`` is set."""

    type: Literal["http"] = "http"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    allow_remote: bool = False

    @model_validator(mode="after")
    def _check_url(self) -> HttpTransport:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port]/path, got {self.url!r}")
        if not self.allow_remote and not is_loopback(parts.hostname):
            raise ValueError(
                f"{parts.hostname} is not a loopback address; "
                "set allowRemote (CLI: --allow-remote) to use a remote server"
            )
        return self


class Timeouts(_Model):
    """How long a call may take and how long connecting may take, in seconds."""

    call_seconds: float = Field(DEFAULT_CALL_SECONDS, gt=0)
    connect_seconds: float = Field(DEFAULT_CONNECT_SECONDS, gt=0)


class Registration(_Model):
    """One MCP server as registered: its id, display name, transport, state, the permission
    of each tool (``off`` unless listed) and timeouts. Its JSON form is the file on disk."""

    id: str
    display_name: str
    transport: StdioTransport | HttpTransport = Field(discriminator="type")
    state: State = "active"
    tool_permissions: dict[str, Permission] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)

    @model_validator(mode="after")
    def _check_id(self) -> Registration:
        if not _ID.fullmatch(self.id):
            raise ValueError(f"bad registration id {self.id!r}: letters, digits, '_', '.', '-'")
        if not self.display_name.strip():
            raise ValueError("display name must not be empty")
        return self

    def permission(self, tool: str) -> Permission:
        """The permission of the server's tool ``tool`` (``off`` unless set)."""
        return self.tool_permissions.get(tool, "off")

    def with_permissions(self, changes: Mapping[str, Permission]) -> Registration:
        """A copy with ``changes`` merged into the tool permissions."""
        merged = {**self.tool_permissions, **changes}
        return self.model_copy(update={"tool_permissions": merged})

    def to_json(self) -> dict[str, Any]:
        """The registration's JSON form, as its file holds it."""
        return self.model_dump(mode="json", by_alias=True)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost`` or a loopback address)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def slugify(name: str) -> str:
    """A registration id made from a display name (``server`` if nothing is left)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.").lower()[:48]
    return slug or "server"


class DiscoveredTool(_Model):
    """One tool of a server's ``tools/list``, as validated and cached."""

    name: str
    description: str = ""
    input_schema: dict[str, Any]
    title: str | None = None


class SkippedTool(_Model):
    """A tool of a server's ``tools/list`` left out, with the reason."""

    name: str
    reason: str


class DiscoveredCatalog(_Model):
    """One full, validated ``tools/list``; ``discovered_at`` is a Unix time."""

    discovered_at: float
    tools: tuple[DiscoveredTool, ...] = ()
    skipped: tuple[SkippedTool, ...] = ()

    @property
    def names(self) -> list[str]:
        """The discovered tools' names, in the server's order."""
        return [t.name for t in self.tools]

    def age_text(self, now: float | None = None) -> str:
        """How long ago the discovery was, with its UTC time."""
        seconds = max((now or time.time()) - self.discovered_at, 0)
        when = datetime.fromtimestamp(self.discovered_at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
            if seconds >= size:
                return f"{int(seconds // size)} {unit} ago ({when})"
        return f"{int(seconds)} s ago ({when})"


def validate_tool(name: Any, schema: Any) -> str | None:
    """Why a listed tool cannot be offered, or ``None``."""
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        return "name breaks the MCP tool name rules (1-128 of A-Z a-z 0-9 _ . -)"
    try:
        ToolId.mcp("x", name)
    except ValueError as exc:
        return str(exc)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "input schema root is not an object"
    return None


@dataclass(frozen=True, slots=True)
class BrokenRegistration:
    """A registration file that was skipped, and why."""

    id: str
    path: Path
    problem: str

    @property
    def diagnostic(self) -> str:
        """The message naming the unusable file, its problem and the fix."""
        return (
            f"MCP registration {self.path.name} skipped: {self.problem}. Fix the file, "
            f"or delete it with `tavern-agent mcp remove {self.id}`."
        )


class _Cached:
    __slots__ = ("key", "value")

    def __init__(self, key: tuple[int, int, int], value: Any) -> None:
        self.key = key
        self.value = value


class RegistrationStore:
    """Registrations and catalogs under ``<data>/mcp``."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "mcp"
        self.registrations_dir = self.root / "registrations"
        self.catalog_dir = self.root / "catalog"
        self.logs_dir = self.root / "logs"
        self.oauth_dir = self.root / "oauth"
        self._cache: dict[Path, _Cached] = {}
        self._paths: dict[str, Path] = {}

    # ------------------------------------------------------------ reading

    def _read(self, path: Path, model: type[_Model]) -> Any:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._cache.pop(path, None)
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached.key == key:
            return cached.value
        try:
            value = model.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise RegistrationError(describe_invalid(exc)) from None
        self._cache[path] = _Cached(key, value)
        return value

    def get(self, reg_id: str) -> Registration | None:
        """The registration as it is on disk now (re-read only when the file changed).

        Raises :class:`RegistrationError` naming the file when it cannot be used.
        """
        path = self._paths.get(reg_id)
        if path is None:  # build and check each id's path once: this runs before every call
            if not _ID.fullmatch(reg_id):
                return None
            path = self._paths[reg_id] = self.registrations_dir / f"{reg_id}.json"
        try:
            reg: Registration | None = self._read(path, Registration)
        except RegistrationError as exc:
            raise RegistrationError(BrokenRegistration(reg_id, path, str(exc)).diagnostic) from None
        if reg is not None and reg.id != reg_id:
            problem = f"its id {reg.id!r} does not match the file name"
            raise RegistrationError(BrokenRegistration(reg_id, path, problem).diagnostic)
        return reg

    def scan(self) -> tuple[list[Registration], list[BrokenRegistration]]:
        """Every usable registration, and every file that was skipped with its problem."""
        if not self.registrations_dir.is_dir():
            return [], []
        found: list[Registration] = []
        broken: list[BrokenRegistration] = []
        for path in sorted(self.registrations_dir.glob("*.json")):
            if not _ID.fullmatch(path.stem):
                problem = "the file name is not a registration id (letters, digits, _ . -)"
                broken.append(BrokenRegistration(path.stem, path, problem))
                continue
            try:
                reg = self._read(path, Registration)
            except RegistrationError as exc:
                broken.append(BrokenRegistration(path.stem, path, str(exc)))
                continue
            if reg is None:
                continue
            if reg.id != path.stem:
                problem = f"its id {reg.id!r} does not match the file name"
                broken.append(BrokenRegistration(path.stem, path, problem))
                continue
            found.append(reg)
        return found, broken

    def all(self) -> list[Registration]:
        """Every usable registration (broken files are skipped; see :meth:`broken`)."""
        return self.scan()[0]

    def broken(self) -> list[BrokenRegistration]:
        """Registration files that cannot be used, each with its problem."""
        return self.scan()[1]

    def find(self, ref: str) -> Registration:
        """A registration by id, else by display name (case-insensitive).

        Raises :class:`RegistrationError` when none matches, several do, or the
        file ``ref`` names is broken (the message says why and how to remove it).
        """
        reg = self.get(ref)
        if reg is not None:
            return reg
        matches = [r for r in self.all() if r.display_name.lower() == ref.lower()]
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(r.id for r in matches)
            raise RegistrationError(f"{ref!r} names several servers ({ids}); use the id")
        known = ", ".join(r.id for r in self.all()) or "none registered"
        raise RegistrationError(f"no MCP server {ref!r} (known: {known})")

    def catalog(self, reg_id: str) -> DiscoveredCatalog | None:
        """The cached discovery; ``None`` when there is none or it cannot be read
        (it is only a cache: the next ``mcp discover`` rewrites it)."""
        try:
            found: DiscoveredCatalog | None = self._read(
                self.catalog_dir / f"{reg_id}.json", DiscoveredCatalog
            )
        except RegistrationError:
            return None
        return found

    # ------------------------------------------------------------ writing

    def new_id(self, display_name: str) -> str:
        """A registration id for ``display_name`` that no file uses yet."""
        base = slugify(display_name)
        candidate, n = base, 1
        while (self.registrations_dir / f"{candidate}.json").exists():
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def save(self, reg: Registration) -> None:
        """Write ``reg`` owner-only (0600), also over an older, wider file.

        Headers, environment, arguments and URLs can all carry a secret, so
        every registration file is treated as one.
        """
        data = json.dumps(reg.to_json(), indent=2, ensure_ascii=False) + "\n"
        atomic_write(self.registrations_dir / f"{reg.id}.json", data.encode(), mode=0o600)

    def save_catalog(self, reg_id: str, catalog: DiscoveredCatalog) -> None:
        """Store a server's discovered catalog atomically."""
        data = json.dumps(catalog.model_dump(mode="json", by_alias=True), ensure_ascii=False)
        atomic_write(self.catalog_dir / f"{reg_id}.json", data.encode())

    def remove(self, reg_id: str) -> bool:
        """Delete the registration file named ``reg_id`` (usable or not) and its catalog."""
        if not reg_id or "/" in reg_id or "\\" in reg_id or reg_id.startswith("."):
            return False
        removed = False
        for path in (
            self.registrations_dir / f"{reg_id}.json",
            self.catalog_dir / f"{reg_id}.json",
            self.oauth_path(reg_id),
        ):
            try:
                path.unlink()
                removed = True
            except FileNotFoundError:
                pass
            self._cache.pop(path, None)
        return removed

    def log_path(self, reg_id: str) -> Path:
        """The registration's server log file (what a stdio server writes to stderr)."""
        return self.logs_dir / f"{reg_id}.log"

    def oauth_path(self, reg_id: str) -> Path:
        """The OAuth client registration and tokens of an HTTP server (mode 0600)."""
        return self.oauth_dir / f"{reg_id}.json"


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(root)"
    return f"{where}: {first['msg']}"


def describe_invalid(exc: ValidationError) -> str:
    """Why a stored file failed validation, in words a person can act on."""
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
    unknown = [".".join(str(p) for p in e["loc"]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        keys = ", ".join(unknown[:5])
        return f"unknown keys {keys} (written by a newer version of tavern-agent?)"
    return _first_error(exc)


def parse_registration(data: Any) -> Registration:
    """A registration from its JSON form; raises ``RegistrationError`` naming the first problem."""
    try:
        return Registration.model_validate(data)
    except ValidationError as exc:
        raise RegistrationError(_first_error(exc)) from None


def import_mcp_servers(data: Any, store: RegistrationStore) -> list[Registration]:
    """Registrations from the common ``{"mcpServers": {name: {...}}}`` desktop-client file.

    Entries take ``command``/``args``/``env``/``cwd`` (stdio) or ``url``/``headers``
    (Streamable HTTP; ``type: "sse"`` is refused). Nothing is written; the
    caller saves what it accepts. New registrations have every tool ``off``.
    """
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise RegistrationError('expected a JSON object with an "mcpServers" object')
    taken: set[str] = set()
    found: list[Registration] = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise RegistrationError(f"mcpServers.{name}: expected an object")
        transport: dict[str, Any]
        if "command" in entry:
            transport = {
                "type": "stdio",
                "command": entry["command"],
                "args": entry.get("args") or [],
                "env": entry.get("env") or {},
                "cwd": entry.get("cwd"),
            }
        elif "url" in entry:
            if entry.get("type") == "sse":
                raise RegistrationError(f"mcpServers.{name}: SSE transport is not supported")
            transport = {"type": "http", "url": entry["url"], "headers": entry.get("headers") or {}}
        else:
            raise RegistrationError(f"mcpServers.{name}: needs 'command' or 'url'")
        reg_id = store.new_id(name)
        while reg_id in taken:
            reg_id = f"{reg_id}-x"
        taken.add(reg_id)
        state = "paused" if entry.get("disabled") else "active"
        try:
            reg = parse_registration(
                {"id": reg_id, "displayName": name, "transport": transport, "state": state}
            )
        except RegistrationError as exc:
            raise RegistrationError(f"mcpServers.{name}: {exc}") from None
        found.append(reg)
    return found
