"""Exactly-once consume-transform-produce against a trio_broker (or any Kafka broker).

    trio_broker run &                      # serves localhost:9092
    python examples/exactly_once.py --count 20

Writes ``--count`` records to an input topic, then runs a transactional loop with
confluent-kafka (librdkafka): read a batch (read_committed), write the upper-cased values to an
output topic, and commit the consumed offsets in the same transaction
(``send_offsets_to_transaction``). Every third batch is aborted on purpose and re-read, so the
output shows each input exactly once to read_committed readers, while read_uncommitted readers
also see the aborted copies. Prints both counts.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def count_output(bootstrap: str, topic: str, isolation: str, partitions: int,
                 settle_s: float = 2.0) -> int:
    """Records in ``topic`` visible at ``isolation``: read until nothing new for a while."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    quiet_until = time.monotonic() + settle_s
    while time.monotonic() < quiet_until:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
            quiet_until = time.monotonic() + settle_s
    consumer.close()
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="host:port of the broker")
    parser.add_argument("--count", type=int, default=20, help="input records")
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)
    run = uuid.uuid4().hex[:8]
    source, sink, group = f"eos-in-{run}", f"eos-out-{run}", f"eos-{run}"

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for future in admin.create_topics([NewTopic(source, args.partitions),
                                       NewTopic(sink, args.partitions)]).values():
        try:
            future.result(15)
        except TimeoutError:  # e.g. no broker there: one line, not a traceback
            print(f"exactly_once.py: no answer from {args.bootstrap} within 15 s",
                  file=sys.stderr)
            return 1
    plain = Producer({"bootstrap.servers": args.bootstrap})
    for i in range(args.count):
        plain.produce(source, value=f"record-{i}".encode(), partition=i % args.partitions)
    if plain.flush(15):
        print("input records were not all delivered", file=sys.stderr)
        return 1

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": f"eos-example-{run}", "linger.ms": 5})
    producer.init_transactions(30)
    done = batches = aborted = 0
    deadline = time.monotonic() + 60
    while done < args.count and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(10, 1.0) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, value=m.value().upper(), partition=m.partition())
        batches += 1
        if batches % 3 == 0:
            producer.flush(15)  # so the aborted copies really reach the log
            producer.abort_transaction(30)
            aborted += len(msgs)
            firsts: dict[int, int] = {}
            for m in msgs:
                firsts.setdefault(m.partition(), m.offset())
            for partition, offset in firsts.items():
                consumer.seek(TopicPartition(source, partition, offset))
            continue
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done += len(msgs)
    consumer.close()
    committed = count_output(args.bootstrap, sink, "read_committed", args.partitions)
    everything = count_output(args.bootstrap, sink, "read_uncommitted", args.partitions)
    print(f"input {args.count}, transactions {batches}, aborted records {aborted}")
    print(f"read_committed sees {committed}, read_uncommitted sees {everything}")
    return 0 if committed == args.count and everything == args.count + aborted else 1


if __name__ == "__main__":
    sys.exit(main())
