"""Soak: a transactional producer that aborts every Nth transaction while batches still linger
(issue 36: OUT_OF_ORDER_SEQUENCE_NUMBER on the first transaction after an abort).

    python -m bench.txn_abort_soak --seconds 120 --abort-delay-ms 10
    python -m bench.txn_abort_soak --seconds 120 --abort-delay-ms 10 --flush-before-abort
    python -m bench.txn_abort_soak --bootstrap host:port ...   # against another broker

Starts a broker (``python -m trio_broker run`` on a free port, JSON log captured) unless
``--bootstrap`` is given, creates a topic, and runs confluent-kafka (librdkafka) transactions:
each writes ``--records`` small records round-robin over the partitions with ``linger.ms`` and a
small ``batch.num.messages`` (so that one transaction is many Produce requests, several per
partition), then commits it, or, every ``--abort-every``-th, aborts it after a random
``--abort-delay-ms``, while batches are still lingering in the client or built and waiting for
an in-flight slot (``--flush-before-abort``: after ``flush()``, the workaround; ``--rate``:
records trickle in as in a copy loop). A transaction that fails is aborted (abortable error) or
the producer is recreated (fatal error), as an application does. docs/transactions.md explains
what it shows: librdkafka skips the sequence numbers of a built but unsent request it purges.

At the end it prints, as JSON: transactions committed/aborted/failed, each failure (which
transaction, how many after the last deliberate abort, the error), the broker's ``request``
lines with ``sequence_errors`` (expected vs received sequence), and, with ``--client-debug``,
librdkafka's own lines about purges, base-msgid moves and sequence errors (``eos``/``msg``/
``broker`` debug contexts, filtered), so a failure can be followed in both processes.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import BrokerLauncher

#: librdkafka debug lines worth keeping (the rest of eos/msg/broker debug is per request).
CLIENT_LINE = re.compile(
    r"PURGE|ADVBASE|RESETSEQ|NEWPID|ERRSEQ|skipped|desynchron|DRAIN|BUMP|TXNERR|"
    r"sequence|epoch base|OUT_OF_ORDER|purged", re.IGNORECASE)


class KeepClientLines(logging.Handler):
    """Keeps librdkafka log lines matching :data:`CLIENT_LINE` (with the transaction number)."""

    def __init__(self, limit: int = 2000) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.limit = limit
        self.txn = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if CLIENT_LINE.search(text) and len(self.lines) < self.limit:
            self.lines.append(f"txn {self.txn}: {text}")


def make_producer(bootstrap: str, txn_id: str, args: argparse.Namespace,
                  handler: KeepClientLines | None) -> Producer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": args.linger_ms,
        "batch.num.messages": args.batch_messages,
        "transaction.timeout.ms": 60000,
    }
    if handler is not None:
        logger = logging.getLogger(f"rdkafka-{txn_id}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)
        conf["debug"] = args.client_debug
        conf["logger"] = logger
    producer = Producer(conf)
    producer.init_transactions(30)
    return producer


def sequence_lines(log_path: Path) -> list[dict[str, Any]]:
    """The broker's ``request`` lines that carry ``sequence_errors``."""
    found = []
    for path in sorted(log_path.parent.glob(log_path.name + "*")):
        with open(path, encoding="utf-8", errors="replace") as log_file:
            for line in log_file:
                if "sequence_errors" not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                found.append({k: event.get(k) for k in (
                    "timestamp", "api_version", "correlation_id", "error", "sequence_errors")})
    return found


def soak(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    topic = f"txn-soak-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions)])[topic].result(30)
    handler = KeepClientLines() if args.client_debug else None
    txn_id = f"txn-soak-{run}"
    producer = make_producer(bootstrap, txn_id, args, handler)
    value = b"x" * args.value_bytes
    delivery_errors: dict[str, int] = {}

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            delivery_errors[err.name()] = delivery_errors.get(err.name(), 0) + 1

    committed = aborted = failed = recreated = 0
    failures: list[dict[str, Any]] = []
    last_abort = -1
    deadline = time.monotonic() + args.seconds
    rng = random.Random(args.seed)
    txn = 0
    while time.monotonic() < deadline and (args.transactions == 0 or txn < args.transactions):
        if handler is not None:
            handler.txn = txn
        deliberate = args.abort_every > 0 and txn % args.abort_every == args.abort_every - 1
        try:
            producer.begin_transaction()
            started = time.monotonic()
            for i in range(args.records):
                producer.produce(topic, value, partition=i % args.partitions,
                                 on_delivery=on_delivery)
                if i % 50 == 0:
                    producer.poll(0)
                    if args.rate:  # records trickle in, as in a copy loop
                        ahead = started + i / args.rate - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
            if deliberate:
                if args.abort_delay_ms:
                    time.sleep(rng.uniform(0, args.abort_delay_ms) / 1000)
                if args.flush_before_abort:
                    # Nothing left built but unsent for abort_transaction() to purge.
                    producer.flush(30)
                producer.abort_transaction(30)
                aborted += 1
                last_abort = txn
            else:
                producer.commit_transaction(30)
                committed += 1
        except KafkaException as exc:
            error = exc.args[0]
            failed += 1
            failures.append({"txn": txn, "after_abort": txn - last_abort if last_abort >= 0
                             else None, "error": error.name(), "fatal": error.fatal(),
                             "abortable": error.txn_requires_abort(),
                             "message": error.str()[:400]})
            # An abortable error (also behind produce()'s _STATE once the transaction failed):
            # abort and go on; a fatal one: a new producer.
            fatal = error.fatal()
            if not fatal:
                try:
                    producer.abort_transaction(30)
                except KafkaException as again:
                    failures[-1]["abort_error"] = again.args[0].str()[:200]
                    fatal = again.args[0].fatal()
            if fatal:
                producer.flush(10)
                producer = make_producer(bootstrap, txn_id, args, handler)
                recreated += 1
        txn += 1
    producer.flush(10)
    return {"topic": topic, "transactions": txn, "committed": committed,
            "aborted_on_purpose": aborted, "failed": failed, "producers_recreated": recreated,
            "failures": failures, "delivery_errors": delivery_errors,
            "client_lines": handler.lines if handler is not None else []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--transactions", type=int, default=0, help="stop after N (0: time)")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--records", type=int, default=240, help="records per transaction")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="records per second within a transaction (0: as fast as possible)")
    parser.add_argument("--abort-every", type=int, default=5)
    parser.add_argument("--abort-delay-ms", type=float, default=0.0,
                        help="sleep a random 0..this between the last produce() and "
                        "abort_transaction()")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--flush-before-abort", action="store_true",
                        help="flush() before abort_transaction() (the workaround)")
    parser.add_argument("--linger-ms", type=float, default=5.0)
    parser.add_argument("--batch-messages", type=int, default=5)
    parser.add_argument("--client-debug", default="",
                        help="librdkafka debug contexts to capture (filtered), e.g. eos,msg,broker")
    parser.add_argument("--keep", help="keep the broker's directory (log) here")
    parser.add_argument("--override", action="append", default=[],
                        help="broker setting key=value (repeatable)")
    args = parser.parse_args(argv)

    if args.bootstrap:
        result = soak(args.bootstrap, args)
        print(json.dumps(result, indent=1))
        return 0
    overrides = dict(item.split("=", 1) for item in args.override)
    with tempfile.TemporaryDirectory(prefix="txn-soak-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        broker = BrokerLauncher(workdir, overrides).start()
        try:
            result = soak(broker.bootstrap, args)
        finally:
            result_code = broker.stop()
        result["broker_exit"] = result_code
        result["broker_log"] = str(broker.log_path)
        result["sequence_errors"] = sequence_lines(broker.log_path)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
