"""``trio_broker transactions``: kafka-transactions.sh (Kafka's TransactionsCommand, KIP-664)
over the wire: list, describe, describe-producers, find-hanging and abort (ListTransactions,
DescribeTransactions, DescribeProducers, Metadata, WriteTxnMarkers)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .admin_client import AdminConnection
from .common import (
    Parser,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    connect,
    emit_json,
    run,
)
from .topics import metadata

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
#: Kafka's default transaction.max.timeout.ms: an open transaction older is a candidate.
DEFAULT_MAX_TIMEOUT_MS = 15 * 60 * 1000

EXAMPLES = """\
  trio_broker transactions --bootstrap-server localhost:9092 list
  trio_broker transactions --bootstrap-server localhost:9092 describe --transactional-id app
  trio_broker transactions --bootstrap-server localhost:9092 describe-producers \\
      --topic orders --partition 0
  trio_broker transactions --bootstrap-server localhost:9092 find-hanging --broker-id 1
  trio_broker transactions --bootstrap-server localhost:9092 abort --topic orders \\
      --partition 0 --start-offset 42
"""


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """TransactionsCommand.prettyPrintTable: each cell padded to its column's widest, then a
    tab (after the last column too)."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["".join(c.ljust(w) + "\t" for c, w in zip(r, widths, strict=True)) for r in cells]


def list_transactions(conn: AdminConnection, producer_ids: Sequence[int] = ()) -> list[Any]:
    response = Request(conn, LIST_TRANSACTIONS).send(
        state_filters=(), producer_id_filters=tuple(producer_ids), duration_filter=-1)
    check(response.error_code, None, "ListTransactions")
    return list(response.transaction_states)


def describe_transaction(conn: AdminConnection, transactional_id: str) -> Any:
    response = Request(conn, DESCRIBE_TRANSACTIONS).send(transactional_ids=(transactional_id,))
    (state,) = response.transaction_states
    check(state.error_code, None, f"transactional id {transactional_id}")
    return state


def producers_of(conn: AdminConnection, topic: str, partition: int) -> list[Any]:
    request = Request(conn, DESCRIBE_PRODUCERS)
    response = request.send(topics=(request.nested(
        "TopicRequest", name=topic, partition_indexes=(partition,)),))
    (result,) = response.topics[0].partitions
    check(result.error_code, result.error_message, f"{topic}-{partition}")
    return list(result.active_producers)


def producer_row(p: Any) -> dict[str, int]:
    return {"producer_id": int(p.producer_id), "producer_epoch": int(p.producer_epoch),
            "coordinator_epoch": int(p.coordinator_epoch),
            "last_sequence": int(p.last_sequence), "last_timestamp": int(p.last_timestamp),
            "current_transaction_start_offset": int(p.current_txn_start_offset)}


def partitions_of(conn: AdminConnection, ns: argparse.Namespace) -> list[tuple[str, int]]:
    """The partitions to search: the topic's (or every topic's), those with a replica on
    ``--broker-id`` when given."""
    meta = metadata(conn, [ns.topic] if ns.topic else None)
    found = []
    for t in meta.topics:
        # Admin.listTopics leaves the internal topics out.
        if t.name is None or (ns.topic and t.name != ns.topic) or (
                not ns.topic and t.is_internal):
            continue
        check(t.error_code, None, f"topic {t.name}")
        for p in t.partitions:
            index = int(p.partition_index)
            if ns.partition is not None and index != ns.partition:
                continue
            if ns.broker_id is not None and ns.broker_id not in {int(r) for r in p.replica_nodes}:
                continue
            found.append((t.name, index))
    return sorted(found)


def find_hanging(conn: AdminConnection, ns: argparse.Namespace) -> list[dict[str, Any]]:
    """TransactionsCommand.FindHangingTransactionsCommand: open transactions whose producer was
    last seen longer ago than the maximum transaction timeout and whose coordinator does not
    list that partition in the transaction (unknown producer id or transactional id, or the
    partition not among DescribeTransactions' partitions)."""
    now = int(time.time() * 1000)
    candidates: list[dict[str, Any]] = []
    for topic, partition in partitions_of(conn, ns):
        for p in producers_of(conn, topic, partition):
            row = producer_row(p)
            start = row["current_transaction_start_offset"]
            if start < 0 or now - row["last_timestamp"] <= ns.max_transaction_timeout * 60_000:
                continue
            candidates.append({"topic": topic, "partition": partition, **row})
    hanging = []
    for c in candidates:
        known = list_transactions(conn, [c["producer_id"]])
        open_here = False
        for listed in known:
            state = describe_transaction(conn, listed.transactional_id)
            parts = {(t.topic, int(i)) for t in state.topics for i in t.partitions}
            if (c["topic"], c["partition"]) in parts:
                open_here = True
        if not open_here:
            c["duration_min"] = (now - c["last_timestamp"]) // 60_000
            hanging.append(c)
    return hanging


def abort(conn: AdminConnection, ns: argparse.Namespace) -> dict[str, Any]:
    """TransactionsCommand.AbortTransactionCommand: by start offset, the producer whose open
    transaction starts there (DescribeProducers); else the given producer; WriteTxnMarkers."""
    if ns.start_offset is not None:
        match = [p for p in producers_of(conn, ns.topic, ns.partition)
                 if int(p.current_txn_start_offset) == ns.start_offset]
        if not match:
            raise ToolError(f"Could not find any open transactions starting at offset "
                            f"{ns.start_offset} on partition {ns.topic}-{ns.partition}")
        pid, epoch = int(match[0].producer_id), int(match[0].producer_epoch)
        coordinator_epoch = max(0, int(match[0].coordinator_epoch))
    else:
        if ns.producer_id is None or ns.producer_epoch is None or ns.coordinator_epoch is None:
            raise UsageError("abort needs --start-offset, or --producer-id, --producer-epoch "
                             "and --coordinator-epoch")
        pid, epoch, coordinator_epoch = ns.producer_id, ns.producer_epoch, ns.coordinator_epoch
    request = Request(conn, WRITE_TXN_MARKERS)
    response = request.send(markers=(request.nested(
        "WritableTxnMarker", producer_id=pid, producer_epoch=epoch, transaction_result=False,
        coordinator_epoch=coordinator_epoch, topics=(request.nested(
            "WritableTxnMarkerTopic", name=ns.topic, partition_indexes=(ns.partition,)),)),))
    result = response.markers[0].topics[0].partitions[0]
    check(result.error_code, None, f"{ns.topic}-{ns.partition}")
    return {"topic": ns.topic, "partition": ns.partition, "producer_id": pid,
            "producer_epoch": epoch, "coordinator_epoch": coordinator_epoch}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker transactions",
                    "List, describe, find hanging and abort transactions "
                    "(kafka-transactions.sh).", EXAMPLES)
    add_connection_options(parser)
    sub = parser.add_subparsers(dest="action", required=True,
                                parser_class=argparse.ArgumentParser)
    sub.add_parser("list", help="the transactional ids the coordinator holds")
    describe = sub.add_parser("describe", help="one transaction's coordinator state")
    describe.add_argument("--transactional-id", required=True)
    producers = sub.add_parser("describe-producers", help="the producers of a partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    ab = sub.add_parser("abort", help="abort a hanging transaction on a partition")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int)
    ab.add_argument("--producer-id", type=int)
    ab.add_argument("--producer-epoch", type=int)
    ab.add_argument("--coordinator-epoch", type=int)
    hang = sub.add_parser("find-hanging", help="open transactions the coordinator lost")
    hang.add_argument("--broker-id", type=int)
    hang.add_argument("--topic")
    hang.add_argument("--partition", type=int)
    hang.add_argument("--max-transaction-timeout", type=int,
                      default=DEFAULT_MAX_TIMEOUT_MS // 60_000,
                      help="minutes an open transaction must have lasted (default 15)")
    return parser


def execute(ns: argparse.Namespace, out: TextIO) -> None:
    lines: list[str]
    with connect(ns, "transactions") as conn:
        if ns.action == "list":
            rows = [{"transactional_id": t.transactional_id, "coordinator": 0,
                     "producer_id": int(t.producer_id), "state": t.transaction_state}
                    for t in list_transactions(conn)]
            node = int(metadata(conn, []).controller_id)
            for r in rows:
                r["coordinator"] = node
            value: Any = rows
            lines = table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                          [tuple(r.values()) for r in rows])
        elif ns.action == "describe":
            s = describe_transaction(conn, ns.transactional_id)
            started = s.transaction_start_time
            start = int(started.timestamp() * 1000) if started is not None else -1
            now = int(time.time() * 1000)
            value = {"transactional_id": ns.transactional_id,
                     "producer_id": int(s.producer_id), "producer_epoch": int(s.producer_epoch),
                     "state": s.transaction_state,
                     "timeout_ms": int(s.transaction_timeout.total_seconds() * 1000),
                     "start_time_ms": start,
                     "duration_ms": now - start if start >= 0 else None,
                     "partitions": [f"{t.topic}-{int(i)}" for t in s.topics
                                    for i in t.partitions]}
            node = int(metadata(conn, []).controller_id)
            lines = table(("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                           "TransactionState",
                           "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                           "TransactionDurationMs", "TopicPartitions"),
                          [(node, value["transactional_id"], value["producer_id"],
                            value["producer_epoch"], value["state"], value["timeout_ms"],
                            start if start >= 0 else "None",
                            value["duration_ms"] if start >= 0 else "None",
                            ",".join(value["partitions"]))])
        elif ns.action == "describe-producers":
            value = [producer_row(p) for p in producers_of(conn, ns.topic, ns.partition)]
            lines = table(("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                           "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"),
                          [(*list(r.values())[:5],
                            r["current_transaction_start_offset"]
                            if r["current_transaction_start_offset"] >= 0 else "None")
                           for r in value])
        elif ns.action == "find-hanging":
            if ns.topic is None and ns.broker_id is None:
                raise UsageError("The `find-hanging` command requires either --topic or "
                                 "--broker-id to limit the scope of the search")
            if ns.partition is not None and ns.topic is None:
                raise UsageError("The --partition argument requires --topic to be provided")
            value = find_hanging(conn, ns)
            lines = table(("Topic", "Partition", "ProducerId", "ProducerEpoch",
                           "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                           "Duration(min)"),
                          [(h["topic"], h["partition"], h["producer_id"], h["producer_epoch"],
                            h["coordinator_epoch"], h["current_transaction_start_offset"],
                            h["last_timestamp"], h["duration_min"]) for h in value])
        else:
            value = abort(conn, ns)
            lines = []
    if ns.output == "json":
        emit_json(value, out)
    elif lines:
        print("\n".join(lines), file=out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``trio_broker transactions``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(build_parser(), argv, lambda ns: execute(ns, output), err)
