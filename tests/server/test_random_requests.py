"""Random but well-formed requests of every implemented API and version never make a handler
fail: each gets an answer (or Kafka's connection close), never a ``request_failed``.

Bodies come from kio's own hypothesis strategies (``st.from_type`` on the generated message
classes), so every field takes values the protocol allows but clients rarely send: negative
partitions, empty names, huge sizes, null arrays. One broker serves the whole module from a
thread of its own, so each example costs one request, not one broker start.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from trio_broker.config import load_config
from trio_broker.protocol.codec import api_name, encode_request, request_schema
from trio_broker.protocol.records import build_batch
from trio_broker.server.app import BrokerApp
from trio_broker.server.registry import supported_versions

# Produce needs record bytes: none, garbage, or a real batch.
st.register_type_strategy(Records, st.one_of(
    st.none(), st.binary(max_size=100),
    st.builds(lambda value: build_batch([(b"k", value, [], 1_700_000_000_000)]),
              st.binary(max_size=50))))

API_VERSIONS = [(key, version) for key, (low, high) in supported_versions().items()
                for version in range(low, high + 1)]


@pytest.fixture(scope="module")
def broker_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    app = BrokerApp(load_config({
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path_factory.mktemp("random-requests")),
        "logging.metrics.snapshot.interval.ms": "0",
        "group.initial.rebalance.delay.ms": "0", "shutdown.graceful.timeout.ms": "500"}))
    ready = threading.Event()
    tokens: list[trio.lowlevel.TrioToken] = []

    async def serve() -> None:
        tokens.append(trio.lowlevel.current_trio_token())
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            ready.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert ready.wait(30), "the broker did not start"
    yield app.listeners[0].port
    trio.from_thread.run(app.shutdown, trio_token=tokens[0])
    thread.join(30)


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS,
                         ids=[f"{api_name(k)}-v{v}" for k, v in API_VERSIONS])
def test_random_requests_never_fail_a_handler(broker_port: int, api_key: int, version: int,
                                              log_events: Any) -> None:
    @settings(max_examples=5, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=st.from_type(request_schema(api_key, version)))
    def send(body: Any) -> None:
        frame = encode_request(api_key, version, 1, "random-requests", body)
        with socket.create_connection(("127.0.0.1", broker_port), timeout=5) as sock:
            sock.sendall(frame)
            # Long polls and joins may park for their whole wait: an answer is not awaited,
            # only that no handler fails.
            sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                sock.recv(65536)

    send()
    failures = log_events.events("request_failed")
    assert failures == [], failures
