"""structlog set-up and the one function the broker logs through.

Lines are rendered on the event loop (cheap) and written by a background thread through a queue,
so a slow disk or terminal never stalls request handling. Files rotate by size.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

from .events import EVENTS, SCHEMA_VERSION, field_problems

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


class SchemaViolation(AssertionError):
    """An event or field that is not declared in ``events.py`` (recorded in strict mode)."""


class LineWriter:
    """Writes rendered lines from a background thread, rotating ``path`` by size.

    The event loop only appends to a deque. The thread wakes every :attr:`FLUSH_INTERVAL`
    seconds (or sooner under a burst) and writes everything queued in one call: waking for each
    line would make the thread compete with the event loop for the GIL on every request.
    """

    FLUSH_INTERVAL = 0.05
    WAKE_AT_LINES = 2000
    #: Lines held for the thread at most: past it new lines are dropped and counted, so a log
    #: that cannot keep up (a stalled disk) never grows the broker's memory without bound.
    MAX_QUEUED_LINES = 100_000

    def __init__(self, path: str | None, max_bytes: int = 0, backup_count: int = 0,
                 stream: TextIO | None = None) -> None:
        self._path = Path(path) if path else None
        self._max_bytes = max_bytes
        self._backup_count = backup_count
        self._lines: collections.deque[str | threading.Event] = collections.deque()
        self._wake = threading.Event()
        self._closing = False
        #: Lines dropped because the queue was full (counted by the writing side) and those
        #: already reported; lines lost to failed writes (counted by the thread).
        self._dropped = 0
        self._dropped_reported = 0
        self._failed_lines = 0
        #: A write failed and has been reported; cleared by the next write that succeeds.
        self._failing = False
        #: Called from the thread with the number of lines lost, once writing works again
        #: (configure_logging makes it log a ``log_lines_dropped`` event).
        self.on_lines_lost: Callable[[int], None] | None = None
        self._stream: TextIO
        self._size = 0
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = self._path.open("a", encoding="utf-8")
            self._size = self._stream.tell()
        else:
            self._stream = stream if stream is not None else sys.stdout
        self._thread = threading.Thread(target=self._run, name="trio-broker-log", daemon=True)
        self._thread.start()

    def write(self, line: str) -> None:
        lines = self._lines
        if len(lines) > self.WAKE_AT_LINES:
            self._wake.set()
            if len(lines) >= self.MAX_QUEUED_LINES:
                self._dropped += 1
                return
        lines.append(line)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.FLUSH_INTERVAL)
            self._wake.clear()
            try:
                self._drain()
                self._report_lost_lines()
            except Exception as exc:  # the thread must live on: else lines pile up forever
                self._report_failure(exc)
            if self._closing and not self._lines:
                return

    def _report_failure(self, exc: BaseException) -> None:
        """Say once on stderr that the log cannot be written (Kafka's log4j reports an
        appender's write failure on stderr and goes on too)."""
        if self._failing:
            return
        self._failing = True
        with contextlib.suppress(OSError, ValueError):
            print(f"trio_broker: cannot write the log ({type(exc).__name__}: {exc}); lines are "
                  "dropped until it can be written again", file=sys.stderr, flush=True)

    def _report_lost_lines(self) -> None:
        dropped = self._dropped - self._dropped_reported
        lost = dropped + self._failed_lines
        # Not while the queue is (nearly) full, or the report itself would be dropped.
        if (not lost or self._failing or self.on_lines_lost is None
                or len(self._lines) >= self.MAX_QUEUED_LINES // 2):
            return
        self._dropped_reported += dropped
        self._failed_lines = 0
        self.on_lines_lost(lost)

    def _drain(self) -> None:
        chunk: list[str] = []
        while self._lines:
            item = self._lines.popleft()
            if isinstance(item, threading.Event):  # a flush() waiting for what came before
                self._write_lines(chunk)
                chunk = []
                item.set()
            else:
                chunk.append(item)
        self._write_lines(chunk)

    def _write_lines(self, lines: list[str]) -> None:
        if not lines:
            return
        if self._path is None or self._max_bytes <= 0:
            # No rotation: one join, no per-line bookkeeping (a line per request passes here).
            self._write_raw(lines, sum(map(len, lines)) + len(lines))
            return
        pending: list[str] = []
        pending_size = 0
        for line in lines:
            size = len(line) + 1
            if (self._path is not None and self._max_bytes > 0
                    and self._size + pending_size + size > self._max_bytes
                    and self._size + pending_size > 0):
                self._write_raw(pending, pending_size)
                pending, pending_size = [], 0
                self._rotate()
            pending.append(line)
            pending_size += size
        self._write_raw(pending, pending_size)

    def _write_raw(self, lines: list[str], size: int) -> None:
        if not lines:
            return
        try:
            if self._path is not None and self._stream.closed:  # a reopen that failed
                self._open()
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()
        except ValueError:  # stream closed under us (interpreter exit)
            return
        except OSError as exc:  # disk full, a closed pipe: these lines are lost, not kept
            self._failed_lines += len(lines)
            self._report_failure(exc)
            return
        self._failing = False
        self._size += size

    def _open(self) -> None:
        assert self._path is not None
        self._stream = self._path.open("a", encoding="utf-8")
        self._size = self._stream.tell()

    def _rotate(self) -> None:
        assert self._path is not None
        self._stream.close()
        try:
            if self._backup_count > 0:
                for index in range(self._backup_count - 1, 0, -1):
                    older = self._path.with_name(f"{self._path.name}.{index}")
                    if older.exists():
                        os.replace(older, self._path.with_name(f"{self._path.name}.{index + 1}"))
                os.replace(self._path, self._path.with_name(f"{self._path.name}.1"))
            else:
                self._path.unlink(missing_ok=True)
        except OSError as exc:  # not rotated: go on writing to the same file
            self._report_failure(exc)
            self._open()
            self._size = 0  # and try again only after another max_bytes, not every line
            return
        self._open()

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every line written before this call is on its way to the file."""
        if not self._thread.is_alive():  # closed: nothing will write, so do not wait
            return
        marker = threading.Event()
        self._lines.append(marker)
        self._wake.set()
        marker.wait(timeout)

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._thread.join(timeout=5)
        if self._path is not None:
            self._stream.close()


class _WriterLogger:
    """The structlog logger: hands each rendered line to the :class:`LineWriter`."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer

    def msg(self, message: str) -> None:
        self._writer.write(message)

    log = debug = info = warning = warn = error = critical = exception = msg


_state: dict[str, Any] = {"writer": None, "strict": False, "broker": None, "violations": [],
                          "silenced": frozenset()}


def _check_schema(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]
                  ) -> MutableMapping[str, Any]:
    if not _state["strict"]:
        return event_dict
    # Recorded, not raised: raising inside the broker would turn a schema slip into a closed
    # connection; the test suite fails on any recorded violation instead. Types are checked
    # too: Spark reads a line with a wrongly typed value as malformed.
    for problem in field_problems(str(event_dict.get("event")), event_dict):
        _state["violations"].append(SchemaViolation(problem))
    return event_dict


def schema_violations() -> list[SchemaViolation]:
    """Violations recorded in strict mode since the last call (and clears them)."""
    found = list(_state["violations"])
    _state["violations"].clear()
    return found


class _Timestamp:
    """ISO 8601 UTC with microseconds (``2026-03-14T09:01:00.123456Z``), as structlog's
    ``TimeStamper(fmt="iso", utc=True)`` writes it, but formatting the date and time only once
    per second: the per-request log line cannot afford a datetime round trip."""

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = ""
        self._prefix = ""

    def __call__(self) -> str:
        # Microseconds since the epoch as digits: the last six are the fraction, the rest the
        # second (string slices: cheaper per line than float arithmetic and a format spec).
        digits = str(time.time_ns() // 1000)
        second = digits[:-6]
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(int(second)))
            self._second = second
        return self._prefix + digits[-6:] + "Z"


_timestamp = _Timestamp()


def _add_common(_logger: Any, method: str, event_dict: MutableMapping[str, Any]
                ) -> MutableMapping[str, Any]:
    """The connection's fields (when the task serves one) and the common fields, in one step
    (each processor is a call per line)."""
    info = _CONNECTION.get()
    if info is not None:
        event_dict["connection_id"] = info.connection_id
        event_dict["listener"] = info.listener
        event_dict["processor"] = info.processor
        event_dict["peer"] = info.peer
        event_dict["security_protocol"] = info.security_protocol
    event_dict["level"] = method if method != "warn" else "warning"
    event_dict["broker"] = _state["broker"]
    event_dict["schema_version"] = SCHEMA_VERSION
    event_dict["timestamp"] = _timestamp()
    sink = _CAPTURE.get()
    if sink is not None:
        sink(event_dict)
    return event_dict


def _orjson_dumps(event_dict: Any, **kwargs: Any) -> str:
    """The line as compact JSON, ASCII only (as ``json.dumps`` writes it by default).

    orjson renders a line in about a fifth of json.dumps's time. It writes non-ASCII characters
    as they are, U+2028 and U+0085 among them, which Python's ``splitlines`` and other readers
    take for line ends; such lines (a client id or topic name with non-ASCII characters: rare)
    and values orjson refuses (integers beyond 64 bits) go through json.dumps instead.
    """
    try:
        line: bytes | None = orjson.dumps(event_dict, **kwargs)
    except TypeError:  # orjson.JSONEncodeError
        line = None
    if line is not None and line.isascii():
        return line.decode("ascii")
    return json.dumps(event_dict, separators=(",", ":"), **kwargs)


def _report_lines_lost(count: int) -> None:
    emit("log_lines_dropped", lines=count)


#: The lines written per request or per connection (``logging.traffic``): what Kafka logs in its
#: request logger (off by default) or at DEBUG (connections, authentications, throttling). They
#: are what the analyze jobs read, so JSON output has them; on a terminal they would drown the
#: lifecycle lines and warnings (one idle consumer: a line per fetch).
TRAFFIC_EVENTS = frozenset({
    "request", "connection_accepted", "connection_closed", "client_registered",
    "authentication_succeeded", "throttle_started", "throttle_ended",
})


def writes_traffic(traffic: str | bool | None, fmt: str) -> bool:
    """Whether the :data:`TRAFFIC_EVENTS` are written: ``logging.traffic`` (``auto``/None: in
    JSON output only; ``true``; ``false``) for output in ``fmt``."""
    if traffic is None or traffic == "auto":
        return fmt == "json"
    if isinstance(traffic, str):
        return traffic.lower() == "true"
    return traffic


def configure_logging(*, broker_id: int, file: str | None = None, fmt: str | None = None,
                      level: str = "INFO", max_bytes: int = 0, backup_count: int = 0,
                      strict: bool = False, stream: TextIO | None = None,
                      traffic: str | bool | None = None) -> LineWriter:
    """Configure structlog for the broker; returns the writer (call ``close()`` at exit).

    ``fmt`` None picks console output on a terminal and JSON otherwise. ``traffic`` is
    ``logging.traffic``: whether the per-request and per-connection lines
    (:data:`TRAFFIC_EVENTS`) are written; None (``auto``) writes them in JSON output only.
    """
    previous = _state["writer"]
    if previous is not None:
        previous.close()
    writer = LineWriter(file, max_bytes, backup_count, stream)
    out = stream if stream is not None else sys.stdout
    if fmt is None:
        fmt = "console" if file is None and out.isatty() else "json"
    renderer: Any = (structlog.dev.ConsoleRenderer(colors=False) if fmt == "console"
                     else structlog.processors.JSONRenderer(serializer=_orjson_dumps))
    _state.update(writer=writer, strict=strict, broker=broker_id,
                  silenced=frozenset() if writes_traffic(traffic, fmt) else TRAFFIC_EVENTS)
    writer.on_lines_lost = _report_lines_lost
    # No merge_contextvars: nothing binds structlog context variables (connections use
    # _CONNECTION), and copying the task's context on every line costs more than it is worth.
    processors = [_add_common, _check_schema, renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=lambda *args: _WriterLogger(writer),
        cache_logger_on_first_use=False,
    )
    global _logger, _pipeline
    _logger = structlog.get_logger("trio_broker").bind()
    _pipeline = (_LEVELS[level.lower()], tuple(processors), writer)
    _methods.clear()
    return writer


# Until configure_logging runs, structlog's lazy proxy (default configuration); afterwards a
# concrete logger bound to the current configuration, which skips the proxy on every event.
_logger: Any = structlog.get_logger("trio_broker")
#: Each declared event's log method, resolved once per configuration.
_methods: dict[str, Any] = {}
#: What configure_logging set up: (lowest level written, the processor chain, the writer).
_pipeline: tuple[int, tuple[Any, ...], LineWriter] | None = None


def _skip(event: str, fields: dict[str, Any]) -> None:
    """An event below the configured level."""


def _method_for(level: str) -> Any:
    """A function ``(event, fields)`` that writes an event at ``level``.

    Once configured, it runs the same processor chain as structlog's bound logger, without the
    logger's per-call machinery (two keyword repackings, a context copy, three calls): that
    machinery cost more than rendering the line. The output is the same line.
    """
    if _pipeline is None:
        method = getattr(_logger, level)
        return lambda event, fields: method(event, **fields)
    lowest, processors, writer = _pipeline
    if _LEVELS[level] < lowest:
        return _skip
    write = writer.write
    renderer = processors[-1]
    dumps_kw = getattr(renderer, "_dumps_kw", None)
    if (processors[:-1] == (_add_common, _check_schema)
            and isinstance(renderer, structlog.processors.JSONRenderer)
            and getattr(renderer, "_dumps", None) is _orjson_dumps
            and isinstance(dumps_kw, dict) and dumps_kw.keys() == {"default"}):
        # The JSON chain configure_logging builds, its three calls written out (the
        # renderer's own call, ``**dumps_kw`` and the loop cost ~0.5 µs of a ~4 µs line).
        default = dumps_kw["default"]

        def log_json(event: str, fields: dict[str, Any]) -> None:
            fields["event"] = event
            _add_common(None, level, fields)
            _check_schema(None, level, fields)
            write(_orjson_dumps(fields, default=default))

        return log_json

    def log_event(event: str, fields: dict[str, Any]) -> None:
        fields["event"] = event
        line: Any = fields
        for processor in processors:
            line = processor(None, level, line)
        write(line)

    return log_event


def emit(event: str, /, **fields: Any) -> None:
    """Write one declared event at the level its declaration gives."""
    emit_fields(event, fields)


def emit_fields(event: str, fields: dict[str, Any], /) -> None:
    """:func:`emit` with the fields in a dict the caller built and hands over (it gains the
    common fields): for the per-request line, whose 19 keyword arguments, repacked into a
    dict, cost about 1 µs. The event-declaration test checks its dict literal's keys."""
    _write_event(event, fields)


def emit_recorded(event: str, fields: Mapping[str, Any], /) -> None:
    """Write an event that sans-IO code recorded instead of writing it (the group rules'
    ``Effects.emit("name", ...)``: the event-declaration test checks those calls, where the
    name and fields are written)."""
    _write_event(event, dict(fields))


def _write_event(event: str, fields: dict[str, Any]) -> None:
    method = _methods.get(event)
    if method is None:
        spec = EVENTS.get(event)
        method = _methods[event] = (
            _skip if event in _state["silenced"]
            else _method_for(spec.level if spec is not None else "info"))
    method(event, fields)


# The connection a task works for. One context variable holding the connection's facts is much
# cheaper to set per request (in handler tasks) than binding five structlog variables.
_CONNECTION: contextvars.ContextVar[Any] = contextvars.ContextVar("trio_broker_connection",
                                                                 default=None)


#: Where the events of one broker's tasks are also handed, as dicts (``trio_broker.testing``
#: sets it in the task that runs a broker; its tasks and worker threads inherit it).
_CAPTURE: contextvars.ContextVar[Callable[[MutableMapping[str, Any]], None] | None] = (
    contextvars.ContextVar("trio_broker_capture", default=None))


class capturing:  # noqa: N801  (used like a function: ``with capturing(sink):``)
    """Hand every event of the block (and of tasks and worker threads started in it, which copy
    the context) to ``sink`` as well. Events below the configured level are not written, so
    not captured."""

    __slots__ = ("_sink", "_token")

    def __init__(self, sink: Callable[[MutableMapping[str, Any]], None]) -> None:
        self._sink = sink

    def __enter__(self) -> None:
        self._token = _CAPTURE.set(self._sink)

    def __exit__(self, *exc: object) -> None:
        _CAPTURE.reset(self._token)


def is_configured() -> bool:
    """Whether :func:`configure_logging` has run in this process."""
    return _pipeline is not None


def bind_connection(info: Any) -> None:
    """Tag every later event of the current task with the connection's fields
    (``connection_id``, ``listener``, ``processor``, ``peer``, ``security_protocol``).

    For a connection's own task: its context is its own copy, so nothing needs undoing.
    """
    _CONNECTION.set(info)


class for_connection:  # noqa: N801  (used like a function: ``with for_connection(info):``)
    """Tag the events of a block with a connection's fields (handler tasks serve many)."""

    __slots__ = ("_info", "_token")

    def __init__(self, info: Any) -> None:
        self._info = info

    def __enter__(self) -> None:
        self._token = _CONNECTION.set(self._info)

    def __exit__(self, *exc: object) -> None:
        _CONNECTION.reset(self._token)


def flush() -> None:
    writer = _state["writer"]
    if writer is not None:
        writer.flush()
