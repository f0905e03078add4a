"""The broker process survives any byte sequence (issue 9): mutated real client frames and
hypothesis-generated frames against the real ``trio_broker run`` command.

Seeds are the request frames real clients sent (confluent-kafka, kafka-python, aiokafka, kcat),
captured once into ``tests/data/client_frames`` by ``python -m bench.capture_frames``; the
mutation fuzzer is ``bench/fuzzing.py`` (shared with ``python -m bench --only fuzz``). The test
fails with the frame (hex) that killed the broker when one does. Set ``TRIO_BROKER_FUZZ_SEED``
to replay another sequence.
"""

from __future__ import annotations

import os
import signal
import struct
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.common import rss_bytes
from bench.fuzzing import (
    VARINTS,
    FuzzStats,
    Mutant,
    Mutator,
    api_of,
    frame,
    fuzz,
    load_seed_frames,
    prepare_broker,
    split_frames,
    summary,
)
from tests.conftest import BrokerProcess
from tests.kafka_wire import API_VERSIONS_V3, METADATA_ALL_V12
from trio_broker.protocol.codec import decode_response, encode_request, is_flexible
from trio_broker.server.registry import supported_versions

pytestmark = pytest.mark.timeout(120)

SEED = int(os.environ.get("TRIO_BROKER_FUZZ_SEED", "9"))
MUTANTS = 20_000
HYPOTHESIS_FRAMES = 600
CONCURRENCY = 32
#: Frames per connection: the broker closes a connection at its first refused frame, so the
#: frames after it are never read; short batches waste few.
MAX_BATCH = 3
#: Mutated Fetch/JoinGroup/SyncGroup frames may ask the broker to park for up to 2^31 ms; idle
#: expiry (as in Kafka, it also covers a connection whose request is parked) bounds them so that
#: every connection ends and the leak check is exact.
#: Topics come from the replayed seeds (``prepare_broker``): a mutated Metadata request must
#: not auto-create a topic per random name (CreateTopics mutants are validate-only, see
#: ``bench.fuzzing.validate_only``).
OVERRIDES = {"connections.max.idle.ms": "3000", "logging.metrics.snapshot.interval.ms": "0",
             "auto.create.topics.enable": "false"}
RSS_GROWTH_LIMIT = 48 * 1024 * 1024


def _api_versions_frame(correlation_id: int = 0x7FFF0001) -> bytes:
    return encode_request(18, 3, correlation_id, "fuzz-test", API_VERSIONS_V3)


@st.composite
def _generated_frame(draw: st.DrawFn) -> bytes:
    """A header of a supported (API, version) and a body made of edge-case pieces."""
    table = supported_versions()
    key = draw(st.sampled_from(sorted(table)))
    low, high = table[key]
    version = draw(st.integers(low, high))
    client_id = draw(st.binary(max_size=12))
    header = struct.pack(">hhih", key, version, draw(st.integers(-(2**31), 2**31 - 1)),
                         len(client_id)) + client_id
    if is_flexible(key, version):
        header += draw(st.sampled_from([b"\x00", b"\x01", b"\xff\xff\xff\xff\x0f"]))
    piece = st.one_of(
        st.binary(max_size=8), st.sampled_from(VARINTS),
        st.integers(-(2**31), 2**31 - 1).map(lambda v: struct.pack(">i", v)),
        st.integers(-(2**15), 2**15 - 1).map(lambda v: struct.pack(">h", v)),
    )
    body = b"".join(draw(st.lists(piece, max_size=12)))
    return frame(header + body)


def hypothesis_frames(count: int) -> list[bytes]:
    """``count`` generated frames, the same ones every run (derandomized)."""
    frames: list[bytes] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(_generated_frame())
    def collect(wire: bytes) -> None:
        frames.append(wire)

    collect()
    return frames


async def check_answers(port: int) -> None:
    """A fresh client still gets ApiVersions and Metadata answered."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(_api_versions_frame(1)
                              + encode_request(3, 12, 2, "fuzz-test", METADATA_ALL_V12))
        answers: list[bytes] = []
        pending = b""
        with trio.fail_after(10):
            while len(answers) < 2:
                data = await stream.receive_some(65536)
                assert data, "broker closed a valid client's connection"
                got, pending = split_frames(pending + data)
                answers += got
    correlation, versions = decode_response(18, 3, answers[0])
    assert (correlation, versions.error_code) == (1, 0)
    correlation, metadata = decode_response(3, 12, answers[1])
    assert correlation == 2
    assert {t.name for t in metadata.topics} >= {
        "cap-confluent", "cap-kafka-python", "cap-aiokafka", "cap-kcat"}


def _death_message(stats: FuzzStats, broker: BrokerProcess) -> str:
    assert broker.process is not None and broker.process.stderr is not None
    stderr = broker.process.stderr.read().decode(errors="replace")
    return (f"the broker died (seed {SEED}, exit {broker.process.returncode}); "
            + " | ".join(stats.death_reports) + f"\nbroker stderr (tail): {stderr[-1500:]}")


def _mutants_of(wires: list[bytes]) -> Iterator[Mutant]:
    for index, wire in enumerate(wires):
        yield Mutant(index, wire, api_of(wire[4:]) if len(wire) >= 8 else (-1, -1),
                     ("hypothesis",), True)


async def _wait_for_closes(broker: BrokerProcess) -> tuple[int, int]:
    """Accepted and closed connection counts, once they match (or after 15 s: a leak)."""
    with trio.move_on_after(15):
        while True:
            accepted = len(broker.events("connection_accepted"))
            closed = len(broker.events("connection_closed"))
            if accepted == closed:
                break
            await trio.sleep(0.1)
    return accepted, closed


async def test_broker_survives_mutated_client_frames(
        broker_process: Callable[..., BrokerProcess]) -> None:
    seeds = load_seed_frames()
    all_seeds = [p for frames in seeds.values() for p in frames]
    broker = broker_process(OVERRIDES)
    assert broker.process is not None
    pid = broker.process.pid

    def alive() -> bool:
        return broker.process is not None and broker.process.poll() is None

    valid_frames = await prepare_broker(broker.port, seeds)
    await check_answers(broker.port)
    valid_frames += 2

    mutator = Mutator(all_seeds, SEED)
    mutants = iter(mutator)
    preamble = _api_versions_frame()
    with trio.fail_after(90):
        warm = await fuzz(broker.port, mutants, count=1_000, is_alive=alive,
                          concurrency=CONCURRENCY, max_batch=MAX_BATCH, preamble=preamble, seed=SEED)
        assert not warm.deaths, _death_message(warm, broker)
        rss_start = rss_bytes(pid)
        stats = await fuzz(broker.port, mutants, count=MUTANTS - 1_000, is_alive=alive,
                           concurrency=CONCURRENCY, max_batch=MAX_BATCH, preamble=preamble, seed=SEED + 1)
        assert not stats.deaths, _death_message(stats, broker)
        generated = await fuzz(broker.port, _mutants_of(hypothesis_frames(HYPOTHESIS_FRAMES)),
                               count=HYPOTHESIS_FRAMES, is_alive=alive,
                               concurrency=CONCURRENCY, max_batch=MAX_BATCH, preamble=preamble, seed=SEED + 2)
        assert not generated.deaths, _death_message(generated, broker)
        rss_end = rss_bytes(pid)

    # Every API a real client sends was fuzzed.
    assert set(mutator.api_counts) == {api_of(p) for p in all_seeds}
    assert alive()
    await check_answers(broker.port)
    accepted, closed = await _wait_for_closes(broker)
    assert accepted == closed, f"leaked connections: {accepted} accepted, {closed} closed"
    assert rss_end - rss_start < RSS_GROWTH_LIMIT, (rss_start, rss_end)

    events = broker.events()
    names = Counter(e["event"] for e in events)
    # The broker's own count of the fuzzed frames it read: answered or refused requests, less
    # the valid ones this test sent (replayed seeds, ApiVersions preambles, the two checks).
    runs = (warm, stats, generated)
    valid_frames += 2 + sum(run.preambles for run in runs)
    read = names["request"] + names["invalid_request"] - valid_frames
    assert read >= 10_000, (read, names, runs)
    failed = [e for e in events if e["event"] == "request_failed"]
    assert not failed, f"{len(failed)} handler failures, e.g. {failed[:3]}"
    refused = [e for e in events if e["event"] == "invalid_request"]
    assert all(e.get("reason") for e in refused)
    # Each refused frame is logged once, on the connection it closed.
    per_connection = Counter(e["connection_id"] for e in refused)
    assert max(per_connection.values()) == 1
    closed_invalid = {e["connection_id"] for e in events if e["event"] == "connection_closed"
                      and e["reason"] == "invalid_frame"}
    assert closed_invalid == set(per_connection)

    # Stop it as an operator does, then read everything it wrote to stderr.
    broker.process.send_signal(signal.SIGTERM)
    assert broker.process.stderr is not None
    stderr = broker.process.stderr.read().decode(errors="replace")
    assert broker.stop() == 0, stderr
    assert "Traceback" not in stderr, stderr
    print(f"fuzz seed {SEED}: {summary(mutator)}; {read} frames read by the broker, "
          f"{sum(run.connections for run in runs)} connections, "
          f"{names['invalid_request']} refused, RSS {rss_start >> 20} -> {rss_end >> 20} MiB")

