"""The run journal ``events.jsonl``: append-only, one JSON line per event.

Each line is ``{seq, id, runId, timestamp, level, type, payload}``. ``seq``
counts from 1 without gaps. A process killed mid-write can leave a torn last
line; opening the journal again cuts it off (it was never acknowledged), and
:func:`read_events` ignores it.

Writers take turns (a durable engine's steps hold the run's lock); a writer
that finds events another appended since its own last one counts them before
it appends, so ``seq`` stays gapless.

The events are the typed values of :mod:`tavern_agent.runtime.events`:
:meth:`Journal.write` takes one, and :func:`read_journal` and
:meth:`JournalTail.new_records` give back :class:`JournalRecord` values that
hold them. :func:`read_events` and :meth:`JournalTail.new_events` give the
lines as the JSON objects they are (``runs show --json``, checks of the file).

Every event is written to the file at once, so a killed process loses none.
Against a power loss, the writer makes the journal durable (one fsync) only
at barriers: before a call or a commit whose effect must not be repeated
blindly, at the end of each turn, and when the run ends. Events between two
barriers are either all kept or lost together with work that can be redone.

Delegated children running in this process share barriers (a group commit):
a child's turn end has none of its own (the family's next barrier covers it),
and a child about to run a call that must not be repeated awaits
:meth:`Journal.synced`. Every such wait that begins while the event loop runs
its current batch of ready tasks is met by one fsync after that batch, so
children that reach their calls together cost one fsync, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import msgspec

from tavern_agent.runtime import context_events as _context_events
from tavern_agent.runtime.events import Event, JournalEvent, Level, Opaque

_ = _context_events  # the window's kinds are journal kinds too

Line = dict[str, Any]  # a line as its JSON object


def _kinds(cls: type[JournalEvent]) -> Iterator[type[JournalEvent]]:
    if "kind" in vars(cls):
        yield cls
    for sub in cls.__subclasses__():
        yield from _kinds(sub)


KINDS: Mapping[str, type[JournalEvent]] = {cls.kind: cls for cls in _kinds(JournalEvent)}
"""Every event kind, by its tag, in the order :mod:`~tavern_agent.runtime.events` defines them."""


def decode_event(kind: str, payload: Any) -> Event:
    """The value of one line's ``type`` and ``payload``; :class:`Opaque` if it does not fit."""
    cls = KINDS.get(kind)
    if cls is None or not isinstance(payload, dict):
        return Opaque(kind, payload)
    try:
        return msgspec.convert(payload, cls)
    except msgspec.ValidationError:
        return Opaque(kind, payload)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One line of the journal: where it stands, and its typed event."""

    seq: int
    id: str
    run_id: str
    timestamp: str
    level: str
    event: Event

    @property
    def kind(self) -> str:
        """The line's ``type``: the event's kind."""
        return self.event.kind

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> JournalRecord:
        """A line's object as a record; an event that does not fit its kind is opaque."""
        seq = line.get("seq")
        return cls(
            seq if isinstance(seq, int) else 0,
            str(line.get("id", "")),
            str(line.get("runId", "")),
            str(line.get("timestamp", "")),
            str(line.get("level", "info")),
            decode_event(str(line.get("type", "")), line.get("payload")),
        )

    def to_json(self) -> Line:
        """The record as its line's object."""
        return {
            "seq": self.seq,
            "id": self.id,
            "runId": self.run_id,
            "timestamp": self.timestamp,
            "level": self.level,
            "type": self.event.kind,
            # an opaque event's payload as it was read (it may not even be an object)
            "payload": self.event.raw if isinstance(self.event, Opaque) else self.event.payload(),
        }


Listener = Callable[[JournalRecord], None]


def _records(events: list[Line]) -> list[JournalRecord]:
    return [JournalRecord.from_json(e) for e in events if isinstance(e, dict)]


def read_events(path: Path) -> list[Line]:
    """Every complete line of a journal as its JSON object, in order (a torn last line is
    skipped): the file as written. :func:`read_journal` gives the typed records."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    events: list[Line] = []
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except (ValueError, RecursionError):
            break  # only the last line can be torn; nothing after it was written
    return events


def read_journal(path: Path) -> list[JournalRecord]:
    """Every complete event of a journal as a record, in order (a torn last line is skipped)."""
    return _records(read_events(path))


class JournalTail:
    """Reads the events appended to a journal since the last look (a follower's view).

    Only the new bytes are read and parsed; a torn or half-written last line is
    left for the next look.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_events(self) -> list[Line]:
        """The complete lines written since the previous look, as their JSON objects."""
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        events: list[Line] = []
        for line in data.split(b"\n")[:-1]:  # after the last newline: not complete yet
            if line:
                try:
                    events.append(json.loads(line))
                except (ValueError, RecursionError):
                    break  # a torn line: nothing after it was written
            self._offset += len(line) + 1
        return events

    def new_records(self) -> list[JournalRecord]:
        """The complete events written since the previous look, as records."""
        return _records(self.new_events())


def _complete_length(data: bytes) -> int:
    """Bytes of ``data`` up to the end of its last complete JSON line."""
    end = 0
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is torn or empty
        if line:
            try:
                json.loads(line)
            except (ValueError, RecursionError):
                break
        end += len(line) + 1
    return end


class Journal:
    """Appends events to ``events.jsonl``; ``listeners`` see each event once it is written.

    ``fsync=False`` never syncs (tests and benchmarks); otherwise :meth:`sync`
    (or ``append(..., sync=True)``) makes every event so far durable.
    """

    def __init__(self, path: Path, run_id: str, *, fsync: bool = True) -> None:
        self.path = path
        self.run_id = run_id
        self.fsync = fsync
        self.listeners: list[Listener] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes() if path.exists() else b""
        keep = _complete_length(data)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if keep != len(data):
            os.ftruncate(self._fd, keep)
        self._end = os.lseek(self._fd, 0, os.SEEK_END)  # where this writer's last event ends
        self.seq = len(read_events(path))
        self._unsynced = False
        self._group: asyncio.Handle | None = None  # the group sync asked for, not yet run
        self._group_loop: asyncio.AbstractEventLoop | None = None  # the loop it runs on
        self._waiters: list[asyncio.Future[None]] = []  # calls waiting for that sync

    def write(
        self, event: Event, *, level: Level | None = None, sync: bool = False
    ) -> JournalRecord:
        """Append ``event`` (at its kind's level unless ``level`` says otherwise); ``sync``
        makes it durable, with every event before it."""
        if os.fstat(self._fd).st_size != self._end:
            self._count_others()
        record = JournalRecord(
            self.seq + 1,
            f"evt_{secrets.token_hex(8)}",
            self.run_id,
            datetime.now(UTC).isoformat(timespec="milliseconds"),
            level or event.level,
            event,
        )
        data = (
            json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":"), default=str)
            + "\n"
        )
        self._write(data.encode("utf-8", "surrogatepass"))
        self.seq = record.seq
        self._unsynced = True
        if sync:
            self.sync()
        for listener in self.listeners:
            listener(record)
        return record

    def append(
        self, type: str, payload: Mapping[str, Any], *, level: str = "info", sync: bool = False
    ) -> JournalRecord:
        """Append a line of kind ``type`` from a JSON ``payload`` (a copied journal's, a
        test's): typed if it fits its kind, opaque otherwise. The run writes typed events
        with :meth:`write`."""
        return self.write(decode_event(type, dict(payload)), level=cast(Level, level), sync=sync)

    def _count_others(self) -> None:
        """Another writer appended since this one's last event (a durable engine's
        step of the same run, while this one's model answered): count its events so
        that ``seq`` goes on without a gap or a repeat. A torn last line is cut off
        as on opening: its writer died (the live one holds the run's lock now)."""
        os.lseek(self._fd, self._end, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._fd, 1 << 20):
            chunks.append(chunk)
        tail = b"".join(chunks)
        keep = _complete_length(tail)
        if keep != len(tail):
            os.ftruncate(self._fd, self._end + keep)
        self.seq += tail[:keep].count(b"\n")
        self._end += keep

    def appended(self) -> list[JournalRecord] | None:
        """The complete events another writer appended since this one's last event,
        counted as :meth:`write` counts them (a durable engine that folds them onto its
        state: see ``Engine.catch_up``); None if the file is shorter than that. A torn
        last line is left for :meth:`write`."""
        if self.size() < self._end:
            return None
        os.lseek(self._fd, self._end, os.SEEK_SET)
        chunks = []
        while chunk := os.read(self._fd, 1 << 20):
            chunks.append(chunk)
        events: list[Line] = []
        for line in b"".join(chunks).split(b"\n")[:-1]:  # after the last newline: torn
            try:
                events.append(json.loads(line))
            except (ValueError, RecursionError):
                break  # a torn line: nothing after it was written
            self.seq += 1
            self._end += len(line) + 1
        return _records(events)

    def size(self) -> int:
        """The journal file's length in bytes now."""
        return os.fstat(self._fd).st_size

    def _write(self, data: bytes) -> None:
        """Append one whole line, or nothing: a full disk may take part of a write."""
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
            self._end = start + done
        except OSError as exc:
            with contextlib.suppress(OSError):  # cut the torn part off; appends go on after
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def sync(self) -> None:
        """Make every event written so far durable (a barrier; free when nothing is new)."""
        if self.fsync and self._unsynced and self._fd >= 0:
            os.fsync(self._fd)
        self._unsynced = False
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)

    async def synced(self) -> None:
        """Wait until every event written so far is durable: one fsync, once the event
        loop has run the tasks that are ready now, for every task asking meanwhile."""
        if not (self.fsync and self._unsynced):
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        if self._group is None or self._group_loop is not loop:  # (an earlier loop's is dead)
            self._group, self._group_loop = loop.call_soon(self._group_sync), loop
        await waiter

    def _group_sync(self) -> None:
        self._group = None
        try:
            self.sync()
        except OSError as exc:  # the waiting calls fail as a direct sync would have
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)

    def close(self) -> None:
        """Make every event durable and close the file."""
        if self._group is not None:
            self._group.cancel()
            self._group = None
        if self._fd >= 0:
            try:
                self.sync()
            finally:
                os.close(self._fd)
                self._fd = -1
