"""Produce a few keyed records with headers to a trio_broker (or any Kafka broker).

    trio_broker run &                      # serves localhost:9092
    python examples/producer.py --topic demo --count 10

Uses confluent-kafka (librdkafka) with idempotence and acks=all; prints where each record landed.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import KafkaError, Message, Producer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="host:port of the broker")
    parser.add_argument("--topic", default="example", help="topic (auto-created if missing)")
    parser.add_argument("--count", type=int, default=10, help="records to produce")
    parser.add_argument("--compression", default="none",
                        choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for every delivery report")
    args = parser.parse_args(argv)

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,  # implies acks=all
        "compression.type": args.compression,
        "linger.ms": 5,
    })
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(str(error))
            print(f"failed: {error}", file=sys.stderr)
        else:
            print(f"{message.topic()}[{message.partition()}]@{message.offset()} "
                  f"key={message.key()!r} value={message.value()!r}")

    for index in range(args.count):
        producer.produce(
            args.topic,
            key=f"key-{index % 3}".encode(),
            value=f"message {index} at {time.strftime('%H:%M:%S')}".encode(),
            headers=[("index", str(index).encode())],
            on_delivery=delivered,
        )
        producer.poll(0)
    remaining = producer.flush(args.timeout)
    if remaining:
        print(f"{remaining} records were not delivered within {args.timeout}s", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
