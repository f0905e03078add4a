"""A consumer group: several consumers share a topic's partitions and commit their progress.

    trio_broker run --override group.initial.rebalance.delay.ms=0 &
    python examples/producer.py --topic demo              # or any producer
    python examples/consumer_group.py --topic demo --members 3 --partitions 6

Starts ``--members`` confluent-kafka consumers (one thread each) in group ``--group``, prints
each rebalance (who owns which partitions) and every record read, commits offsets as it goes,
and stops when the group has read everything there is (or after ``--timeout`` seconds). Run it
again with the same group and it resumes at the committed offsets: nothing is read twice.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_print_lock = threading.Lock()
_assigned = threading.Event()


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        try:
            future.result(10)
        except KafkaException as exc:
            print(f"create topic: {exc}", file=sys.stderr)


def run_member(name: str, args: argparse.Namespace, stop: threading.Event,
               counts: dict[str, int], lock: threading.Lock) -> None:
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": name,
        "partition.assignment.strategy": args.strategy,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
    })

    def on_assign(_consumer: Any, partitions: list[TopicPartition]) -> None:
        _assigned.set()
        say(f"[{name}] assigned {sorted(p.partition for p in partitions)}")

    def on_revoke(_consumer: Any, partitions: list[TopicPartition]) -> None:
        say(f"[{name}] revoked  {sorted(p.partition for p in partitions)}")

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                print(f"[{name}] error: {message.error()}", file=sys.stderr, flush=True)
                continue
            with lock:
                counts[name] = counts.get(name, 0) + 1
            if not args.quiet:
                value = (message.value() or b"")[:60]
                say(f"[{name}] {message.topic()}[{message.partition()}]@{message.offset()}: "
                    f"{value!r}")
    finally:
        consumer.close()  # commits the final offsets and leaves the group at once


def lag(bootstrap: str, group: str, topic: str) -> int:
    """Records not yet committed by the group, over all partitions."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = probe.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p) for p in partitions]
        committed = probe.committed(tps, timeout=10)
        total = 0
        for tp in committed:
            _low, high = probe.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                     timeout=10)
            total += high - max(tp.offset, 0)
        return total
    finally:
        probe.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="example")
    parser.add_argument("--group", default="example-group")
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6,
                        help="partitions of the topic if it has to be created")
    parser.add_argument("--strategy", default="range",
                        choices=["range", "roundrobin", "cooperative-sticky"])
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--quiet", action="store_true", help="do not print every record")
    args = parser.parse_args(argv)

    try:
        ensure_topic(args.bootstrap, args.topic, args.partitions)
    except KafkaException as exc:  # e.g. no broker there: one line, not a traceback
        print(f"consumer_group.py: {exc.args[0].str()} ({args.bootstrap})", file=sys.stderr)
        return 1
    stop = threading.Event()
    counts: dict[str, int] = {}
    lock = threading.Lock()
    threads = [threading.Thread(target=run_member, args=(f"member-{i}", args, stop, counts, lock))
               for i in range(args.members)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + args.timeout
    try:
        # Done when the group's committed offsets reach the end of every partition.
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if _assigned.is_set() and lag(args.bootstrap, args.group, args.topic) == 0:
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    print(f"records read per member: {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
