"""Cap a noisy producer with a client-id quota, then watch it being throttled.

    trio_broker run &                      # serves localhost:9092
    python examples/quotas.py --client-id noisy --rate 204800 --megabytes 3

1. sets ``producer_byte_rate`` for the client id with ``trio_broker quotas`` (confluent-kafka's
   AdminClient has no client-quota API, so this is what ``kafka-configs.sh --alter --add-config
   producer_byte_rate=... --entity-type clients --entity-name ...`` does);
2. produces ``--megabytes`` with that ``client.id`` through confluent-kafka, counting the throttle
   events librdkafka reports (``throttle_cb``: the ``throttle_time_ms`` of the broker's answers);
3. prints the observed rate against the quota, and removes the quota again (unless ``--keep``).

Kafka measures a rate over ``quota.window.num`` x ``quota.window.size.seconds`` (11 x 1 s) and
counts a young window as at least 10 s long, so the first ``10 x rate`` bytes pass at full speed;
produce more than that to see the cap (3 MB at 200 KiB/s takes about 15 s).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from confluent_kafka import KafkaError, Message, Producer, ThrottleEvent


def quotas(bootstrap: str, *args: str) -> int:
    """Run ``trio_broker quotas`` as an operator would, echoing the command and its output."""
    command = [sys.executable, "-m", "trio_broker", "quotas", "--bootstrap-server", bootstrap,
               *args]
    print("$ trio_broker quotas " + " ".join(command[4:]))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    for line in (done.stdout + done.stderr).splitlines():
        print(f"  {line}")
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092", help="host:port of the broker")
    parser.add_argument("--topic", default="quota-example", help="topic (auto-created)")
    parser.add_argument("--client-id", default="noisy-producer", help="client.id to cap")
    parser.add_argument("--rate", type=int, default=200 * 1024,
                        help="producer_byte_rate in bytes/s (default 204800)")
    parser.add_argument("--megabytes", type=float, default=3.0, help="how much to produce")
    parser.add_argument("--record-bytes", type=int, default=10_000, help="size of each value")
    parser.add_argument("--keep", action="store_true", help="leave the quota in place")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for every delivery report")
    args = parser.parse_args(argv)

    entity = ("--entity-type", "clients", "--entity-name", args.client_id)
    if quotas(args.bootstrap, "--alter", "--add-config", f"producer_byte_rate={args.rate}",
              *entity):
        return 1
    quotas(args.bootstrap, "--describe", *entity)

    throttles: list[ThrottleEvent] = []
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "client.id": args.client_id,
        "acks": "all",
        "linger.ms": 5,
        "throttle_cb": throttles.append,
    })
    value = b"x" * args.record_bytes
    count = max(1, int(args.megabytes * 1_000_000) // args.record_bytes)
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(args.topic, value=value, on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: the broker is holding us back
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(args.timeout)
    elapsed = time.monotonic() - started

    sent = (count - remaining) * args.record_bytes
    print(f"produced {sent} bytes in {elapsed:.2f} s as client.id={args.client_id!r}: "
          f"{sent / elapsed / 1024:.1f} KiB/s observed, quota {args.rate / 1024:.1f} KiB/s")
    total_ms = sum(event.throttle_time for event in throttles) * 1000
    print(f"throttle events: {len(throttles)}, throttled for {total_ms:.0f} ms in all")
    for event in throttles[:5]:
        print(f"  {event}")
    if len(throttles) > 5:
        print(f"  ... {len(throttles) - 5} more")

    if not args.keep:
        quotas(args.bootstrap, "--alter", "--delete-config", "producer_byte_rate", *entity)
    if remaining or failures:
        print(f"{remaining} records undelivered, {len(failures)} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
