"""Read one partition of a topic from a chosen offset (assign + seek, no consumer group).

    python examples/consumer.py --topic demo                  # from the beginning
    python examples/consumer.py --topic demo --offset 5 --partition 0
    python examples/consumer.py --topic demo --offset -1      # only new records (latest)

Uses confluent-kafka (librdkafka). Stops at the end of the partition unless --follow is given.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="host:port of the broker")
    parser.add_argument("--topic", default="example")
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--offset", type=int, default=-2,
                        help="first offset to read; -2: the beginning, -1: the end")
    parser.add_argument("--follow", action="store_true", help="keep waiting for new records")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="give up after this many seconds without reaching the end")
    args = parser.parse_args(argv)

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        # assign() needs no group; the id only names the client's (unused) group.
        "group.id": "trio-broker-example",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    start = {-2: OFFSET_BEGINNING, -1: OFFSET_END}.get(args.offset, args.offset)
    # Assigning with an offset is librdkafka's seek for a partition that is not yet fetching.
    consumer.assign([TopicPartition(args.topic, args.partition, start)])
    deadline = time.monotonic() + args.timeout
    try:
        while args.follow or time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    if args.follow:
                        continue
                    return 0
                print(f"error: {error}", file=sys.stderr)
                return 1
            timestamp_type, timestamp = message.timestamp()
            print(f"{message.topic()}[{message.partition()}]@{message.offset()} "
                  f"ts={timestamp} key={message.key()!r} value={message.value()!r} "
                  f"headers={message.headers()}")
    finally:
        consumer.close()
    print("timed out before the end of the partition", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
