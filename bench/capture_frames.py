"""Record the request frames real Kafka clients send, for the fuzz tests and byte-exact vectors.

``python -m bench.capture_frames [--out tests/data/client_frames]`` starts ``trio_broker run``
behind a recording TCP proxy (the broker advertises the proxy's port, so clients that follow
Metadata's advertised listener stay on it), runs each client's scenario in a subprocess through
the proxy, and writes the client→broker frames of each client as plain concatenated Kafka frames
(4-byte size, then the payload) to ``<out>/<client>.bin`` plus ``<out>/index.json``, and the
record batches of their Produce requests to ``tests/data/vectors`` (a hand-written Produce
parser: the vectors check the broker's codec, so they are not cut out with it).

Clients: confluent-kafka (admin, plain/idempotent/compressed producers, a consumer group with
commits), kafka-python (producer, consumer group), aiokafka (producer, consumer group) and kcat
(``-L``, ``-P``, ``-C``). Frames are deduplicated (ignoring the correlation id) and capped per
API version so the data stays small; re-running the script regenerates the files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from trio_broker.protocol.codec import api_name

from .common import REPO_ROOT, BrokerLauncher, bench_env, free_port

CLIENTS = ("confluent", "kafka_python", "aiokafka", "kcat")
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "client_frames"
VECTORS_OUT = REPO_ROOT / "tests" / "data" / "vectors"
#: Frames kept per (API key, version) per client: enough variety, small files.
CAP_PER_VERSION = 12
_SIZE = struct.Struct(">i")
TIMEOUT = 30.0


# ------------------------------------------------------------------------------ proxy
class Recorder:
    """Frames seen client→broker, filed under the client scenario currently running."""

    def __init__(self) -> None:
        self.current = "setup"
        self.frames: dict[str, list[bytes]] = {}

    def record(self, payload: bytes) -> None:
        self.frames.setdefault(self.current, []).append(payload)


async def _pump(source: trio.SocketStream, sink: trio.SocketStream,
                recorder: Recorder | None) -> None:
    buffer = bytearray()
    try:
        while data := await source.receive_some(65536):
            if recorder is not None:
                buffer += data
                while len(buffer) >= 4:
                    (size,) = _SIZE.unpack_from(buffer, 0)
                    if len(buffer) < 4 + size:
                        break
                    recorder.record(bytes(buffer[4:4 + size]))
                    del buffer[:4 + size]
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await sink.aclose()


async def _proxy(listen_port: int, broker_port: int, recorder: Recorder,
                 task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    async def handle(client: trio.SocketStream) -> None:
        try:
            upstream = await trio.open_tcp_stream("127.0.0.1", broker_port)
        except OSError:
            await client.aclose()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, upstream, recorder)
            nursery.start_soon(_pump, upstream, client, None)

    listeners = await trio.open_tcp_listeners(listen_port, host="127.0.0.1")
    task_status.started()
    await trio.serve_listeners(handle, listeners)


# ---------------------------------------------------------------------------- clients
def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "capture-admin"})
    admin.list_topics(timeout=TIMEOUT)
    futures = admin.create_topics([
        NewTopic("cap-confluent", 3, 1, config={"retention.ms": "3600000"}),
        NewTopic("cap-doomed", 1, 1),
    ], operation_timeout=10)
    for future in futures.values():
        future.result(TIMEOUT)
    for future in admin.describe_configs([
        ConfigResource(ResourceType.TOPIC, "cap-confluent"),
        ConfigResource(ResourceType.BROKER, "1"),
    ]).values():
        future.result(TIMEOUT)
    for future in admin.alter_configs([
        ConfigResource(ResourceType.TOPIC, "cap-confluent",
                       set_config={"retention.ms": "7200000"}),
    ]).values():
        future.result(TIMEOUT)
    for future in admin.incremental_alter_configs([
        ConfigResource(ResourceType.TOPIC, "cap-confluent", incremental_configs=[
            ConfigEntry("retention.ms", "5400000",
                        incremental_operation=AlterConfigOpType.SET)]),
    ]).values():
        future.result(TIMEOUT)
    for future in admin.create_partitions([NewPartitions("cap-doomed", 2)]).values():
        future.result(TIMEOUT)
    admin.describe_cluster().result(TIMEOUT)
    for future in admin.delete_topics(["cap-doomed"], operation_timeout=10).values():
        future.result(TIMEOUT)

    settings: list[dict[str, Any]] = [
        {"acks": "all"},
        {"enable.idempotence": True, "compression.type": "gzip"},
        {"compression.type": "snappy", "acks": "1"},
        {"compression.type": "lz4", "enable.idempotence": True},
        {"compression.type": "zstd"},
    ]
    for i, extra in enumerate(settings):
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"capture-p{i}",
                             "linger.ms": 5, **extra})
        for n in range(20):
            producer.produce("cap-confluent", key=f"k{n % 3}".encode(),
                             value=f"value {i}-{n} ".encode() * 3, partition=n % 3,
                             headers=[("h", b"v")] if n % 5 == 0 else None)
        assert producer.flush(TIMEOUT) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cap-confluent-group",
                         "client.id": "capture-consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe(["cap-confluent"])
    got = 0
    deadline = time.monotonic() + TIMEOUT
    while got < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got += 1
            if got % 25 == 0:
                consumer.commit(asynchronous=False)
    assert got == 100, got
    consumer.close()

    admin.list_consumer_groups().result(TIMEOUT)
    for future in admin.describe_consumer_groups(["cap-confluent-group"]).values():
        future.result(TIMEOUT)
    for future in admin.delete_consumer_groups(["cap-confluent-group"]).values():
        future.result(TIMEOUT)


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="capture-kp-admin")
    admin.create_topics([NewTopic("cap-kafka-python", 2, 1), NewTopic("cap-kp-doomed", 1, 1)])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cap-kafka-python")])
    admin.delete_topics(["cap-kp-doomed"])

    for compression in (None, "gzip"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="capture-kp",
                                 compression_type=compression, linger_ms=5)
        for n in range(20):
            producer.send("cap-kafka-python", key=f"k{n}".encode(),
                          value=f"value {n} ".encode() * 3, headers=[("h", b"v")])
        producer.flush(TIMEOUT)
        producer.close(TIMEOUT)
    consumer = KafkaConsumer("cap-kafka-python", bootstrap_servers=bootstrap,
                             group_id="cap-kp-group", client_id="capture-kp-consumer",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=int(TIMEOUT * 1000))
    got = 0
    for _ in consumer:
        got += 1
        if got % 10 == 0:
            consumer.commit()
        if got == 40:
            break
    assert got == 40, got
    consumer.close()
    admin.list_groups()
    admin.describe_groups(["cap-kp-group"])
    admin.list_group_offsets("cap-kp-group")
    admin.close()


def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        for compression in (None, "gzip"):
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="capture-aio",
                                        compression_type=compression,
                                        enable_idempotence=compression is None)
            await producer.start()
            try:
                for n in range(20):
                    await producer.send("cap-aiokafka", key=f"k{n}".encode(),
                                        value=f"value {n} ".encode() * 3,
                                        headers=[("h", b"v")])
                await producer.flush()
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer("cap-aiokafka", bootstrap_servers=bootstrap,
                                    group_id="cap-aio-group", client_id="capture-aio-consumer",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = 0
            while got < 40:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), TIMEOUT)
                got += sum(len(records) for records in batch.values())
                await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(run())


def _kcat(bootstrap: str) -> None:
    kcat = shutil.which("kcat") or "/usr/bin/kcat"
    base = [kcat, "-b", bootstrap]
    subprocess.run([*base, "-L"], check=True, capture_output=True, timeout=TIMEOUT)
    lines = "".join(f"key{n}:value {n}\n" for n in range(20)).encode()
    subprocess.run([*base, "-P", "-t", "cap-kcat", "-K:", "-z", "snappy"], input=lines,
                   check=True, capture_output=True, timeout=TIMEOUT)
    subprocess.run([*base, "-P", "-t", "cap-kcat", "-K:"], input=lines,
                   check=True, capture_output=True, timeout=TIMEOUT)
    out = subprocess.run([*base, "-C", "-t", "cap-kcat", "-o", "beginning", "-e", "-c", "40"],
                         check=True, capture_output=True, timeout=TIMEOUT)
    assert out.stdout.count(b"\n") == 40, out.stdout


SCENARIOS = {"confluent": _confluent, "kafka_python": _kafka_python, "aiokafka": _aiokafka,
             "kcat": _kcat}


# ----------------------------------------------------------------------------- output
def _client_id(payload: bytes) -> bytes:
    (length,) = struct.unpack_from(">h", payload, 8)
    return payload[10:10 + max(length, 0)]


def select_frames(frames: list[bytes], cap: int = CAP_PER_VERSION) -> list[bytes]:
    """Distinct frames (correlation id ignored), at most ``cap`` per API key and version and
    client id (so each producer's compression is kept)."""
    seen: set[bytes] = set()
    per_version: Counter[tuple[int, int, bytes]] = Counter()
    kept = []
    for payload in frames:
        if len(payload) < 8:
            continue
        key = payload[:4] + payload[8:]
        api = (*struct.unpack_from(">hh", payload, 0), _client_id(payload))
        if key in seen or per_version[api] >= cap:
            continue
        seen.add(key)
        per_version[api] += 1
        kept.append(payload)
    return kept


def write_frames(out: Path, recorder: Recorder) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {}
    for client in CLIENTS:
        kept = select_frames(recorder.frames.get(client, []))
        data = b"".join(_SIZE.pack(len(p)) + p for p in kept)
        (out / f"{client}.bin").write_bytes(data)
        counts: Counter[str] = Counter()
        for payload in kept:
            key, version = struct.unpack_from(">hh", payload, 0)
            counts[f"{api_name(key)} ({key}) v{version}"] += 1
        index[client] = {"frames": len(kept), "bytes": len(data),
                         "recorded": len(recorder.frames.get(client, [])),
                         "apis": dict(sorted(counts.items()))}
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return index


# ---------------------------------------------------------------------- record batches
class _Reader:
    """Kafka's primitive types, by hand (the broker's codec is what the vectors check)."""

    def __init__(self, data: bytes, position: int = 0) -> None:
        self.data = data
        self.position = position

    def take(self, count: int) -> bytes:
        if count < 0 or self.position + count > len(self.data):
            raise ValueError("truncated")
        chunk = self.data[self.position:self.position + count]
        self.position += count
        return chunk

    def integer(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        return int(struct.unpack(fmt, self.take(size))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> bytes | None:
        size = self.uvarint() - 1 if flexible else self.integer(">h")
        return None if size < 0 else self.take(size)

    def blob(self, flexible: bool) -> bytes | None:
        size = self.uvarint() - 1 if flexible else self.integer(">i")
        return None if size < 0 else self.take(size)

    def array(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.integer(">i")

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def produce_records(payload: bytes) -> list[tuple[str, int, bytes]]:
    """``(topic, partition, records)`` of a Produce request (v3-v9; flexible from v9)."""
    reader = _Reader(payload)
    reader.integer(">h")
    version = reader.integer(">h")
    reader.integer(">i")
    reader.string(False)  # the header's client id is never compact
    flexible = version >= 9
    if flexible:
        reader.skip_tags()
    reader.string(flexible)  # transactional id
    reader.integer(">h")  # acks
    reader.integer(">i")  # timeout
    found = []
    for _ in range(reader.array(flexible)):
        topic = (reader.string(flexible) or b"").decode()
        for _ in range(reader.array(flexible)):
            partition = reader.integer(">i")
            records = reader.blob(flexible)
            if flexible:
                reader.skip_tags()
            if records:
                found.append((topic, partition, records))
        if flexible:
            reader.skip_tags()
    return found


COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def write_vectors(frames_dir: Path, out: Path, per_kind: int = 2) -> dict[str, Any]:
    """Record batches of the captured Produce requests, ``per_kind`` per client and
    compression, one file each, and an index of where each came from."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.bin"):
        old.unlink()
    index: dict[str, Any] = {}
    for path in sorted(frames_dir.glob("*.bin")):
        data = path.read_bytes()
        position = 0
        kept: Counter[str] = Counter()
        while position < len(data):
            (size,) = _SIZE.unpack_from(data, position)
            payload = data[position + 4:position + 4 + size]
            position += 4 + size
            if struct.unpack_from(">h", payload, 0)[0] != 0:
                continue
            version = struct.unpack_from(">h", payload, 2)[0]
            for topic, partition, records in produce_records(payload):
                # batch attributes: offset 21, the low 3 bits name the codec
                compression = COMPRESSIONS[struct.unpack_from(">h", records, 21)[0] & 7]
                kind = f"{path.stem}-{compression}"
                if kept[kind] >= per_kind:
                    continue
                name = f"{kind}-{kept[kind]}.bin"
                kept[kind] += 1
                (out / name).write_bytes(records)
                index[name] = {"client": path.stem, "client_id": _client_id(payload).decode(),
                               "produce_version": version, "topic": topic,
                               "partition": partition, "compression": compression,
                               "bytes": len(records)}
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return index


async def _capture(out: Path, clients: list[str]) -> dict[str, Any]:
    recorder = Recorder()
    proxy_port = free_port()
    with tempfile.TemporaryDirectory(prefix="trio-broker-capture-") as tmp:
        broker = BrokerLauncher(Path(tmp), {
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
            "group.min.session.timeout.ms": "1000",
        })
        broker.start()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(_proxy, proxy_port, broker.port, recorder)
                for client in clients:
                    recorder.current = client
                    print(f"capturing {client} ...", file=sys.stderr, flush=True)
                    await trio.run_process(
                        [sys.executable, "-m", "bench.capture_frames", "--client", client,
                         "--bootstrap", f"127.0.0.1:{proxy_port}"],
                        env=bench_env(), cwd=str(REPO_ROOT))
                    await trio.sleep(0.5)  # let closing clients' last frames through
                    recorder.current = "after"
                nursery.cancel_scope.cancel()
        finally:
            broker.stop()
    return write_frames(out, recorder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capture_frames", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--vectors-out", type=Path, default=VECTORS_OUT)
    parser.add_argument("--vectors-only", action="store_true",
                        help="only re-extract the record batch vectors from the frames in --out")
    parser.add_argument("--client", choices=CLIENTS, help="(internal) run one client scenario")
    parser.add_argument("--bootstrap", help="(internal) where the client scenario connects")
    args = parser.parse_args(argv)
    if args.client:
        SCENARIOS[args.client](args.bootstrap)
        return 0
    if not args.vectors_only:
        index = trio.run(_capture, args.out, list(CLIENTS))
    vectors = write_vectors(args.out, args.vectors_out)
    print(f"{len(vectors)} record batch vectors in {args.vectors_out}")
    if args.vectors_only:
        return 0
    total = sum(entry["bytes"] for entry in index.values())
    for client, entry in index.items():
        print(f"{client}: {entry['frames']} frames ({entry['recorded']} recorded), "
              f"{entry['bytes']} bytes")
    print(f"total {total} bytes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
