"""Brokers for tests: one in a background thread (any client), one in the test's own Trio run.

Both run a whole :class:`~trio_broker.server.app.BrokerApp` on port 0 with a data directory of
their own, and let the test look inside without a client (:meth:`records`, :meth:`committed`,
:attr:`events`, :attr:`metrics`), restart it (cleanly, or as after a crash) and interfere with
its answers (:meth:`intercept`). Each instance has its own event log and metric registry.

:class:`KafkaBroker` runs ``trio.run`` in a thread: every call from the test's thread goes into
that run with ``trio.from_thread`` (the broker's state is only touched on its own thread).
:class:`TrioKafkaBroker` is started under a nursery of the test's run, so the test's clock is
the broker's: with ``autojump_clock`` a 45 s session timeout passes in no wall time.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import attrs
import trio
from kio.schema.index import api_key_map

from ..config import KAFKA_KEYS_WITHOUT_EFFECT, BrokerConfig, ConfigError, load_config
from ..observability import log
from ..protocol import records as rb
from ..protocol.codec import api_name
from ..server.app import BrokerApp
from .client import TrioKafkaClient
from .intercept import Action, Interception, dispatch

__all__ = ["DEFAULTS", "EventLog", "KafkaBroker", "Metrics", "StoredRecord", "TrioKafkaBroker",
           "build_config"]

#: What the fixtures change from Kafka's defaults, for tests: port 0 on loopback, no initial
#: rebalance delay (a consumer would wait 3 s for its first assignment), one partition of
#: ``__consumer_offsets`` (created at start-up: 50 would cost 50 partition logs per test), no
#: periodic metrics snapshot, a short graceful shutdown.
DEFAULTS: Mapping[str, str] = {
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "logging.metrics.snapshot.interval.ms": "0",
    "shutdown.graceful.timeout.ms": "2000",
}


def build_config(settings: Mapping[str, str], data_dir: Path) -> BrokerConfig:
    """The broker's configuration: :data:`DEFAULTS`, then ``settings``, in ``data_dir``.

    Unlike ``trio_broker run`` (which logs and ignores a key it does not know, as Kafka does), a
    test fails on one: a typo in a test's configuration would otherwise test nothing.
    """
    config = load_config(DEFAULTS, settings, {"log.dirs": str(data_dir)})
    for key in config.ignored_keys:
        if key not in KAFKA_KEYS_WITHOUT_EFFECT:
            raise ConfigError(key, settings.get(key), "not a configuration key of trio_broker "
                              "(see docs/configuration.md)")
    return config


@attrs.frozen
class StoredRecord:
    """One record as stored in a partition log."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class EventLog:
    """The structured log events one broker emitted (as dicts, newest last).

    ``events()`` is every event, ``events("member_expired", group_id="g")`` the matching ones.
    Only events at or above the configured log level are emitted (the plugin logs at DEBUG when
    nothing else configured logging). The oldest are dropped beyond ``maxlen``.
    """

    def __init__(self, maxlen: int = 100_000) -> None:
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=maxlen)
        self._changed = threading.Condition()
        self._async_waiters: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []

    def append(self, event: MutableMapping[str, Any]) -> None:
        """Called for each event by the broker's tasks and worker threads."""
        with self._changed:
            self._events.append(dict(event))
            self._changed.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for token, woken in waiters:
            token.run_sync_soon(woken.set)

    def __call__(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        with self._changed:
            events = list(self._events)
        return [e for e in events if (name is None or e["event"] == name)
                and all(e.get(k) == v for k, v in match.items())]

    def names(self) -> list[str]:
        """The event names, in order."""
        return [e["event"] for e in self()]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self())

    def __len__(self) -> int:
        return len(self._events)

    def clear(self) -> None:
        with self._changed:
            self._events.clear()

    def wait_for(self, name: str, timeout: float = 10.0, **match: Any) -> list[dict[str, Any]]:
        """Block the calling thread until a matching event exists (for sync tests); the
        matching events. Raises :class:`TimeoutError` after ``timeout`` seconds."""
        found: list[dict[str, Any]] = []

        def ready() -> bool:
            found[:] = [e for e in self._events if e["event"] == name
                        and all(e.get(k) == v for k, v in match.items())]
            return bool(found)

        with self._changed:
            if not self._changed.wait_for(ready, timeout):
                raise TimeoutError(f"no {name} event {match or ''} within {timeout} s")
        return found

    async def wait_for_async(self, name: str, **match: Any) -> list[dict[str, Any]]:
        """Wait (in a Trio task, on the Trio clock) until a matching event exists."""
        while not (found := self(name, **match)):
            woken = trio.Event()
            with self._changed:
                if self(name, **match):
                    continue
                self._async_waiters.append((trio.lowlevel.current_trio_token(), woken))
            await woken.wait()
        return found


class Metrics:
    """A broker's Prometheus metrics (docs/metrics.md names them), read on its own thread."""

    def __init__(self, broker: _BrokerCore) -> None:
        self._broker = broker

    def get(self, name: str, **labels: str) -> float | None:
        """One sample's value (``None`` when there is no such sample)::

            broker.metrics.get("kafka_network_requestmetrics_requests_total", request="Produce")
        """
        def read(app: BrokerApp) -> float | None:
            value = app.metrics.registry.get_sample_value(name, labels)
            return None if value is None else float(value)
        return self._broker._call_app(read)

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample called ``name``: ``{sorted label pairs: value}``."""
        def read(app: BrokerApp) -> dict[tuple[tuple[str, str], ...], float]:
            return {tuple(sorted(s.labels.items())): float(s.value)
                    for metric in app.metrics.registry.collect() for s in metric.samples
                    if s.name == name}
        return self._broker._call_app(read)

    def text(self) -> str:
        """The whole registry in Prometheus text format."""
        return self._broker._call_app(lambda app: app.metrics.exposition().decode())


def _api(api: str | int | None) -> str | None:
    if api is None or isinstance(api, int):
        return None if api is None else api_name(api)
    known = {api_name(key) for key in api_key_map}
    if api not in known:
        raise ValueError(f"unknown API {api!r}: one of {', '.join(sorted(known))}")
    return api


class _BrokerCore:
    """What both brokers share; everything that touches the app runs on the broker's thread."""

    def __init__(self, settings: Mapping[str, str], data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.settings = dict(settings)
        self.config = build_config(self.settings, self.data_dir)
        self.events = EventLog()
        self.metrics = Metrics(self)
        self.app: BrokerApp | None = None
        self._listeners: str | None = None
        self._interceptions: list[Interception] = []

    # ----------------------------------------------------------------- broker's thread
    def _call_app(self, fn: Callable[[BrokerApp], Any]) -> Any:
        """Run ``fn(app)`` where the app lives (overridden by the threaded broker)."""
        return self._in_app(fn)

    def _in_app(self, fn: Callable[[BrokerApp], Any]) -> Any:
        """``fn(app)``, its events captured as the broker's own (``create_topic``)."""
        app = self._running()
        with log.capturing(self.events.append):
            return fn(app)

    def _running(self) -> BrokerApp:
        if self.app is None:
            raise RuntimeError("the broker is not running")
        return self.app

    async def _start_app(self, nursery: trio.Nursery) -> None:
        config = self.config
        if self._listeners is not None:  # a restart binds the ports clients already know
            config = build_config({**self.settings, "listeners": self._listeners}, self.data_dir)
        app = BrokerApp(config)
        await nursery.start(self._serve, app)
        self.app = app
        self._listeners = ",".join(f"{b.name}://{b.endpoint.host}:{b.port}"
                                   for b in app.listeners)
        self._install_interceptor()

    async def _serve(self, app: BrokerApp, *,
                     task_status: trio.TaskStatus[BrokerApp] = trio.TASK_STATUS_IGNORED
                     ) -> None:
        # This task's context is copied by every task and worker thread of the broker.
        with log.capturing(self.events.append):
            await app.serve(task_status=task_status)

    async def _stop_app(self, kill: bool = False) -> None:
        app, self.app = self.app, None
        if app is None:
            return
        if kill:
            await app.kill()
        else:
            await app.shutdown()

    def _install_interceptor(self) -> None:
        if self.app is None:
            return
        interceptor = ((lambda ctx, handle: dispatch(self._interceptions, ctx, handle))
                       if self._interceptions else None)
        for pool in self.app._pools:  # noqa: SLF001 - the one hook of the request path
            pool.interceptor = interceptor

    def _add_interception(self, interception: Interception) -> None:
        self._interceptions.append(interception)
        self._install_interceptor()

    def _remove_interception(self, interception: Interception) -> None:
        if interception in self._interceptions:
            self._interceptions.remove(interception)
        self._install_interceptor()

    def _records(self, topic: str, partition: int | None) -> list[StoredRecord]:
        manager = self._running().broker.log_manager  # type: ignore[union-attr]
        info = manager.topics.get(topic)
        if info is None:
            raise KeyError(f"no topic {topic!r}")
        found: list[StoredRecord] = []
        for index in range(info.num_partitions) if partition is None else [partition]:
            plog = manager.get_partition(topic, index)
            if plog is None:
                raise KeyError(f"no partition {topic}-{index}")
            offset, end = plog.log_start_offset, plog.high_watermark
            while offset < end:
                data = manager.read(topic, index, offset, 1 << 20).records
                last = offset
                for position, size in rb.iter_batches(data):
                    batch = data[position:position + size]
                    header = rb.decode_header(batch)
                    last = max(last, header.next_offset)
                    if header.is_control:
                        continue
                    found += [StoredRecord(topic, index, r.offset, r.timestamp, r.key, r.value,
                                           r.headers)
                              for r in rb.decode_records(batch) if offset <= r.offset < end]
                if last <= offset:
                    break
                offset = last
        return found

    def _committed(self, group: str) -> dict[tuple[str, int], int]:
        coordinator = self._running().broker.group_coordinator  # type: ignore[union-attr]
        state = coordinator.groups.get(group)
        if state is None:
            return {}
        return {tp: committed.offset for tp, committed in sorted(state.offsets.items())}

    def _create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None
                      ) -> None:
        manager = self._running().broker.log_manager  # type: ignore[union-attr]
        manager.create_topic(name, partitions, dict(config or {}))

    # ------------------------------------------------------------------- any thread
    @property
    def port(self) -> int:
        """The first listener's port."""
        if self._listeners is None:
            raise RuntimeError("the broker has not started")
        return int(self._listeners.split(",")[0].rsplit(":", 1)[1])

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def records(self, topic: str, partition: int | None = None) -> list[StoredRecord]:
        """What the log of ``topic`` (or one partition) holds, read from storage without a
        client: every record from the log start to the high watermark, by partition then
        offset (control batches of transactions left out); compressed batches (gzip, snappy,
        lz4, zstd) are decompressed."""
        return self._call_app(lambda app: self._records(topic, partition))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The offsets ``group`` has committed: ``{(topic, partition): offset}``."""
        return self._call_app(lambda app: self._committed(group))

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, str] | None = None) -> None:
        """Create a topic directly in storage (as CreateTopics would; errors as its
        ``trio_broker.storage.errors``)."""
        self._call_app(lambda app: self._create_topic(name, partitions, config))

    def intercept(self, api: str | int | None = None, action: Action | None = None, *,
                  nth: int | None = None, times: int | None = None,
                  when: Callable[[Any], bool] | None = None) -> Interception:
        """Change how the broker answers: see :mod:`trio_broker.testing.intercept`.

        ``api`` is Kafka's API name (``"Produce"``) or key, None for every API; the action
        applies to every matching request, only the ``nth`` (1-based), or the first ``times``.
        ``when(request)`` narrows the match (``request.body`` is the decoded kio request). The
        returned :class:`Interception` counts matches and is removed by ``remove()`` or at the
        end of a ``with`` block.
        """
        if action is None:
            raise TypeError("intercept() needs an action: delay(), error(), drop() or close()")
        interception = Interception(api=_api(api), action=action, nth=nth, times=times,
                                    when=when, remover=self._remove_sync)
        self._call_app(lambda app: self._add_interception(interception))
        return interception

    def _remove_sync(self, interception: Interception) -> None:
        if self.app is None:
            self._remove_interception(interception)
        else:
            self._call_app(lambda app: self._remove_interception(interception))


class KafkaBroker(_BrokerCore):
    """A broker in a background thread with its own Trio run: for any client, sync or asyncio.

    The ``kafka_broker`` and ``kafka_broker_session`` fixtures start one; outside pytest::

        with KafkaBroker({"num.partitions": "3"}, tmp_dir) as broker:
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    """

    def __init__(self, settings: Mapping[str, str], data_dir: Path, *,
                 timeout: float = 30.0) -> None:
        super().__init__(settings, data_dir)
        self.timeout = timeout
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._quit: trio.Event | None = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KafkaBroker:
        """Start the thread and wait (``timeout``) until the broker serves."""
        self._thread = threading.Thread(target=self._thread_main, name="kafka-broker",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(self.timeout):
            raise TimeoutError(f"the broker did not start within {self.timeout} s")
        if self._failure is not None:
            self._thread.join(self.timeout)
            raise self._failure
        return self

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._quit = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._start_app(nursery)
            self._ready.set()
            await self._quit.wait()
            with trio.move_on_after(self.timeout) as stopping:
                await self._stop_app()
            nursery.cancel_scope.cancel()
        if stopping.cancelled_caught:
            raise TimeoutError(f"the broker did not stop within {self.timeout} s")

    def _call_app(self, fn: Callable[[BrokerApp], Any]) -> Any:
        if self._token is None or self._failure is not None:
            raise RuntimeError("the broker is not running")
        return trio.from_thread.run_sync(self._in_app, fn, trio_token=self._token)

    def restart(self, kill: bool = False) -> None:
        """Stop the broker and start it again on the same port and data directory.

        ``kill=True`` stops it as a crash would: connections dropped at once, nothing flushed
        or checkpointed, no clean-shutdown marker, so the new broker recovers the logs.
        Interceptions stay installed.
        """
        async def restart() -> None:
            assert self._nursery is not None
            with trio.fail_after(self.timeout):
                await self._stop_app(kill)
                await self._start_app(self._nursery)
        trio.from_thread.run(restart, trio_token=self._token)

    def stop(self) -> None:
        """Shut the broker down cleanly (within ``timeout``) and end the thread."""
        thread, token, quit_ = self._thread, self._token, self._quit
        if thread is None or not thread.is_alive() or token is None or quit_ is None:
            return
        with contextlib.suppress(trio.RunFinishedError):  # the run ended on its own
            token.run_sync_soon(quit_.set)
        thread.join(self.timeout + 5)
        if thread.is_alive():
            raise TimeoutError(f"the broker thread did not end within {self.timeout + 5} s")
        if self._failure is not None:
            raise self._failure


class TrioKafkaBroker(_BrokerCore):
    """A broker under a nursery of the caller's Trio run (``trio_kafka_broker``)::

        async def test_expiry(trio_kafka_broker, autojump_clock):
            async with await trio_kafka_broker.client() as client:
                joined = await client.join_group("g", ["t"], session_timeout_ms=45000)
                ...
    """

    def __init__(self, settings: Mapping[str, str], data_dir: Path) -> None:
        super().__init__(settings, data_dir)
        self._nursery: trio.Nursery | None = None

    async def start(self, nursery: trio.Nursery) -> TrioKafkaBroker:
        self._nursery = nursery
        await self._start_app(nursery)
        return self

    async def restart(self, kill: bool = False) -> None:
        """Stop and start again on the same port and data directory; see
        :meth:`KafkaBroker.restart`."""
        assert self._nursery is not None
        await self._stop_app(kill)
        await self._start_app(self._nursery)

    async def stop(self) -> None:
        await self._stop_app()

    async def client(self, client_id: str = "trio-kafka-client") -> TrioKafkaClient:
        """A connected :class:`~trio_broker.testing.client.TrioKafkaClient` (close it, or use
        ``async with``)."""
        client: TrioKafkaClient = await TrioKafkaClient.connect(self.port, client_id=client_id)
        return client

    async def wait_for_event(self, name: str, **match: Any) -> list[dict[str, Any]]:
        """Wait on the Trio clock until a matching event is emitted; the matching events."""
        return await self.events.wait_for_async(name, **match)
