"""``trio_broker groups``: kafka-consumer-groups.sh over the wire (ListGroups, DescribeGroups and
ConsumerGroupDescribe, OffsetFetch, ListOffsets, OffsetCommit, OffsetDelete, DeleteGroups),
with its options and table formats."""

from __future__ import annotations

import argparse
import datetime
import re
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
from kio.schema.errors import ErrorCode

from .admin_client import AdminConnection
from .common import (
    BrokerError,
    Parser,
    Reported,
    Request,
    ToolError,
    UsageError,
    add_connection_options,
    check,
    client_settings,
    connect_with,
    emit_json,
    run,
)
from .topics import metadata

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 2, 8, 9, 10
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
CONSUMER_GROUP_DESCRIBE = 69
EARLIEST, LATEST = -2, -1
#: Group states in which kafka-consumer-groups.sh lets offsets be reset.
INACTIVE_STATES = ("Empty", "Dead")

EXAMPLES = """\
  trio_broker groups --bootstrap-server localhost:9092 --list
  trio_broker groups --bootstrap-server localhost:9092 --describe --group app
  trio_broker groups --bootstrap-server localhost:9092 --reset-offsets --group app \\
      --topic orders --to-earliest --execute
  trio_broker groups --bootstrap-server localhost:9092 --reset-offsets --group app \\
      --all-topics --to-datetime 2024-01-01T00:00:00.000 --dry-run
  trio_broker groups --bootstrap-server localhost:9092 --reset-offsets --group app \\
      --topic orders:0,1 --shift-by -10 --execute
  trio_broker groups --bootstrap-server localhost:9092 --reset-offsets --group app \
      --topic orders --by-duration PT1H --export > plan.csv
  trio_broker groups --bootstrap-server localhost:9092 --reset-offsets --group app \
      --from-file plan.csv --execute
  trio_broker groups --bootstrap-server localhost:9092 --delete-offsets --group app \
      --topic orders
  trio_broker groups --bootstrap-server localhost:9092 --list --type consumer --state
  trio_broker groups --bootstrap-server localhost:9092 --delete --group app
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker groups",
                    "List, describe, delete consumer groups and reset their offsets "
                    "(kafka-consumer-groups.sh).", EXAMPLES)
    add_connection_options(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="list all consumer groups")
    actions.add_argument("--describe", action="store_true",
                         help="describe a group: offsets, lag and members per partition")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="reset a group's committed offsets (the group must be inactive)")
    actions.add_argument("--delete", action="store_true", help="delete groups")
    actions.add_argument("--delete-offsets", action="store_true",
                         help="delete a group's committed offsets of --topic (OffsetDelete; "
                              "the group must not be consuming the topic)")
    add = parser.add_argument
    add("--group", action="append", default=[], metavar="GROUP",
        help="the consumer group (repeatable for --describe and --delete)")
    add("--all-groups", action="store_true", help="every group (--describe, --delete)")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true",
                      help="--describe: the members (consumer id, host, client id, "
                           "#partitions)")
    view.add_argument("--state", nargs="?", const="", metavar="STATES",
                      help="--describe: coordinator, assignment strategy, state, #members; "
                           "--list: each group's state, only the groups in STATES "
                           "(comma-separated) if given")
    view.add_argument("--offsets", action="store_true",
                      help="--describe: offsets and lag per partition (the default)")
    add("--type", nargs="?", const="", metavar="TYPES",
        help="--list: each group's type (Classic, Consumer), only the groups of TYPES "
             "(comma-separated: classic, consumer) if given")
    add("--verbose", action="store_true",
        help="--describe: more columns (--offsets: LEADER-EPOCH; --members: epochs and "
             "current and target assignments; --state: group and target assignment epochs)")
    add("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
        help="--reset-offsets, --delete-offsets: a topic, optionally with partitions "
             "(repeatable)")
    add("--all-topics", action="store_true",
        help="--reset-offsets: every topic the group has committed offsets for")
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    scenario.add_argument("--to-latest", action="store_true", help="reset to the log end")
    scenario.add_argument("--to-current", action="store_true", help="keep the current offsets")
    scenario.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                          help="reset to the first offset at or after this time (UTC unless "
                               "an offset like +01:00 is given)")
    scenario.add_argument("--shift-by", type=int, metavar="N",
                          help="move each offset by N (negative: back)")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS",
                          help="reset to the first offset at or after this long ago (ISO 8601 "
                               "duration, as Java's Duration.parse: PT1H, P1DT12H, PT0.5S)")
    scenario.add_argument("--from-file", metavar="CSV",
                          help="reset to the offsets of a CSV plan (topic,partition,offset or "
                               "group,topic,partition,offset lines; what --export prints)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the new offsets only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add("--timeout", type=int, metavar="MS",
        help="how long to wait for the broker's answers (request.timeout.ms; Kafka's "
             "default 5000)")
    add("--export", action="store_true",
        help="--reset-offsets: print the new offsets as CSV (topic,partition,offset), for "
             "--from-file")
    return parser


# ------------------------------------------------------------------------ wire helpers
def find_coordinator(conn: AdminConnection, group: str) -> tuple[int, str, int]:
    """FindCoordinator: the group coordinator's ``(node id, host, port)``."""
    request = Request(conn, FIND_COORDINATOR)
    response = request.send(key=group, key_type=0, coordinator_keys=(group,))
    found = response.coordinators[0] if hasattr(response, "coordinators") else response
    check(found.error_code, found.error_message, f"FindCoordinator {group}")
    return int(found.node_id), str(found.host), int(found.port)


def coordinator(conn: AdminConnection, group: str, tool: str = "groups") -> AdminConnection:
    """A connection to ``group``'s coordinator (``conn`` itself when that is the same node)."""
    _node, host, port = find_coordinator(conn, group)
    peer = conn._sock.getpeername()
    if port == peer[1] and host in (peer[0], "localhost"):
        return conn
    return AdminConnection.connect(f"{host}:{port}", client_id=conn.client_id,
                                   security=conn.security)


def list_groups(conn: AdminConnection) -> list[dict[str, str]]:
    response = Request(conn, LIST_GROUPS).send(states_filter=(), types_filter=())
    check(response.error_code, None, "ListGroups")
    return sorted(({"group": g.group_id, "protocol_type": g.protocol_type,
                    "state": getattr(g, "group_state", ""),
                    "type": getattr(g, "group_type", "").capitalize()}
                   for g in response.groups),
                  key=lambda g: g["group"])


def consumer_group_describe(conn: AdminConnection, group: str) -> Any | None:
    """ConsumerGroupDescribe (KIP-848) of a consumer-protocol group; None for a classic group
    (or a broker without the API), which DescribeGroups describes: Kafka's AdminClient
    falls back alike."""
    if CONSUMER_GROUP_DESCRIBE not in conn.broker_versions:
        return None
    response = Request(conn, CONSUMER_GROUP_DESCRIBE).send(
        group_ids=(group,), include_authorized_operations=False)
    described = response.groups[0]
    if described.error_code == ErrorCode.group_id_not_found:
        return None
    check(described.error_code, described.error_message, group)
    return described


def assignment_text(pairs: Sequence[tuple[str, int]]) -> str:
    """ConsumerGroupCommand.getAssignmentString: ``topic:0,1;other:2``, or ``-``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(partition)
    text = ";".join(sorted(f"{t}:" + ",".join(str(p) for p in sorted(ps))
                           for t, ps in by_topic.items()))
    return text or "-"


def _pairs(assignment: Any) -> list[tuple[str, int]]:
    return [(str(t.topic_name), int(p)) for t in assignment.topic_partitions
            for p in t.partitions]


@attrs.frozen
class Member:
    """A group member as the tools show it, from either describe API."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: The partitions the member owns (classic: its SyncGroup assignment).
    assignment: tuple[tuple[str, int], ...]


@attrs.frozen
class Described:
    """A group as Admin.describeConsumerGroups sees it: a consumer-protocol group (KIP-848)
    from ConsumerGroupDescribe (``consumer`` is that answer: epochs, target assignments),
    else a classic group from DescribeGroups (state ``Dead`` when it does not exist)."""

    group_id: str
    group_state: str
    protocol_data: str
    members: tuple[Member, ...]
    consumer: Any = None


def describe_group(conn: AdminConnection, group: str) -> Described:
    consumer = consumer_group_describe(conn, group)
    if consumer is not None:
        return Described(
            str(group), str(consumer.group_state).capitalize(), str(consumer.assignor_name),
            tuple(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                         tuple(_pairs(m.assignment))) for m in consumer.members), consumer)
    response = Request(conn, DESCRIBE_GROUPS).send(groups=(group,),
                                                   include_authorized_operations=False)
    described = response.groups[0]
    check(described.error_code, None, group)
    return Described(
        str(described.group_id), str(described.group_state), described.protocol_data or "",
        tuple(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                     tuple(parse_assignment(bytes(m.member_assignment or b""))))
              for m in described.members))


def parse_assignment(data: bytes) -> list[tuple[str, int]]:
    """A ConsumerProtocolAssignment's ``(topic, partition)`` pairs (empty if not one)."""
    try:
        position = 2
        (count,) = struct.unpack_from(">i", data, position)
        position += 4
        found = []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, position)
            topic = data[position + 2:position + 2 + length].decode()
            position += 2 + length
            (n,) = struct.unpack_from(">i", data, position)
            position += 4
            for _ in range(max(n, 0)):
                found.append((topic, struct.unpack_from(">i", data, position)[0]))
                position += 4
        return found
    except (struct.error, UnicodeDecodeError):
        return []


def committed(conn: AdminConnection, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group``."""
    return {tp: offset for tp, (offset, _epoch) in committed_with_epochs(conn, group).items()}


def committed_with_epochs(conn: AdminConnection, group: str
                          ) -> dict[tuple[str, int], tuple[int, int]]:
    """Every committed offset of ``group`` with its leader epoch (-1: none)."""
    request = Request(conn, OFFSET_FETCH)
    response = request.send(group_id=group, topics=None, require_stable=False, groups=(
        request.nested("OffsetFetchRequestGroup", group_id=group, member_id=None,
                       member_epoch=-1, topics=None),))
    if hasattr(response, "groups"):
        answer = response.groups[0]
        check(answer.error_code, None, group)
        topics = answer.topics
    else:
        check(response.error_code, None, group)
        topics = response.topics
    offsets = {}
    for topic in topics:
        for p in topic.partitions:
            check(p.error_code, None, f"{topic.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                offsets[(topic.name, int(p.partition_index))] = (
                    int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)))
    return offsets


def list_offsets(conn: AdminConnection, partitions: Sequence[tuple[str, int]],
                 timestamp: int, isolation_level: int = 0) -> dict[tuple[str, int], int]:
    """ListOffsets for many partitions at once: -1 latest, -2 earliest, else a time
    (``isolation_level`` 1, read_committed: latest is the last stable offset)."""
    if not partitions:
        return {}
    request = Request(conn, LIST_OFFSETS)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    response = request.send(replica_id=-1, isolation_level=isolation_level, topics=tuple(
        request.nested("ListOffsetsTopic", name=topic, partitions=tuple(
            request.nested("ListOffsetsPartition", partition_index=p, current_leader_epoch=-1,
                           timestamp=timestamp, max_num_offsets=1) for p in indexes))
        for topic, indexes in by_topic.items()))
    found = {}
    for topic in response.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"{topic.name}-{p.partition_index}")
            found[(topic.name, int(p.partition_index))] = int(p.offset)
    return found


def commit(conn: AdminConnection, group: str, offsets: dict[tuple[str, int], int], *,
           member_id: str = "", member_epoch: int = -1) -> None:
    """OffsetCommit: a simple one (generation -1, no member) as
    AdminClient.alterConsumerGroupOffsets, or a member's (its id and epoch)."""
    request = Request(conn, OFFSET_COMMIT)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append((partition, offset))
    if not by_topic:
        return
    response = request.send(
        group_id=group, generation_id_or_member_epoch=member_epoch,
        generation_id=member_epoch, member_id=member_id,
        group_instance_id=None, retention_time_ms=-1, topics=tuple(
            request.nested("OffsetCommitRequestTopic", name=topic, partitions=tuple(
                request.nested("OffsetCommitRequestPartition", partition_index=p,
                               committed_offset=o, committed_leader_epoch=-1,
                               committed_metadata="") for p, o in parts))
            for topic, parts in by_topic.items()))
    for topic in response.topics:
        for p in topic.partitions:
            check(p.error_code, None, f"{topic.name}-{p.partition_index}")


# ---------------------------------------------------------------------------- describe
def describe_rows(conn: AdminConnection, group: str) -> tuple[str, list[dict[str, Any]]]:
    """The group's state and kafka-consumer-groups.sh's ``--describe`` rows."""
    described = describe_group(conn, group)
    with_epochs = committed_with_epochs(conn, group)
    offsets = {tp: offset for tp, (offset, _epoch) in with_epochs.items()}
    owners: dict[tuple[str, int], Member] = {}
    for owner in described.members:
        for tp in owner.assignment:
            owners[tp] = owner
    partitions = sorted(set(offsets) | set(owners))
    ends = list_offsets(conn, partitions, LATEST)
    rows = []
    # Kafka prints the assigned partitions member by member, then the unassigned ones.
    ordered = sorted(partitions, key=lambda tp: (tp not in owners, tp))
    for tp in ordered:
        member = owners.get(tp)
        current, end = offsets.get(tp), ends.get(tp)
        rows.append({
            "group": group, "topic": tp[0], "partition": tp[1],
            "leader_epoch": (with_epochs[tp][1] if tp in with_epochs
                             and with_epochs[tp][1] >= 0 else None),
            "current_offset": current, "log_end_offset": end,
            "lag": None if current is None or end is None else end - current,
            "consumer_id": member.member_id if member else None,
            "host": member.client_host if member else None,
            "client_id": member.client_id if member else None})
    return str(described.group_state), rows


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def describe_table(rows: list[dict[str, Any]], verbose: bool = False) -> list[str]:
    """ConsumerGroupCommand.printOffsets: widths grow with the longest group, topic,
    consumer id and host (at least 15), the other columns are fixed; ``--verbose`` adds
    LEADER-EPOCH (the committed offset's leader epoch)."""
    group_w = max([15, *(len(r["group"]) for r in rows)])
    topic_w = max([15, *(len(r["topic"]) for r in rows)])
    consumer_w = max([15, *(len(_cell(r["consumer_id"])) for r in rows)])
    host_w = max([15, *(len(_cell(r["host"])) for r in rows)])
    epoch = "{:<15} " if verbose else ""
    fmt = (f"{{:<{group_w}}} {{:<{topic_w}}} {{:<10}} {epoch}{{:<15}} {{:<15}} {{:<15}} "
           f"{{:<{consumer_w}}} {{:<{host_w}}} {{}}")
    epoch_title = ["LEADER-EPOCH"] if verbose else []
    lines = ["", fmt.format("GROUP", "TOPIC", "PARTITION", *epoch_title, "CURRENT-OFFSET",
                            "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")]
    for r in rows:
        epoch_cell = [_cell(r["leader_epoch"])] if verbose else []
        lines.append(fmt.format(r["group"], r["topic"], r["partition"], *epoch_cell,
                                _cell(r["current_offset"]), _cell(r["log_end_offset"]),
                                _cell(r["lag"]), _cell(r["consumer_id"]), _cell(r["host"]),
                                _cell(r["client_id"])))
    return lines


def members_rows(described: Described) -> list[dict[str, Any]]:
    """The members of a group: a classic group's (no epochs, no target assignment), or a
    consumer-protocol group's from ConsumerGroupDescribe (epochs and both assignments)."""
    consumer = described.consumer
    if consumer is not None:
        return [{"group": str(consumer.group_id), "consumer_id": m.member_id,
                 "group_instance_id": m.instance_id, "host": m.client_host,
                 "client_id": m.client_id, "partitions": len(_pairs(m.assignment)),
                 "current_epoch": int(m.member_epoch),
                 "assignment": assignment_text(_pairs(m.assignment)),
                 "target_epoch": int(consumer.assignment_epoch),
                 "target_assignment": assignment_text(_pairs(m.target_assignment))}
                for m in consumer.members]
    return [{"group": described.group_id, "consumer_id": m.member_id,
             "group_instance_id": m.group_instance_id, "host": m.client_host,
             "client_id": m.client_id, "partitions": len(m.assignment),
             "current_epoch": None, "assignment": assignment_text(m.assignment),
             "target_epoch": None, "target_assignment": "-"} for m in described.members]


def members_table(rows: list[dict[str, Any]], verbose: bool = False) -> list[str]:
    """ConsumerGroupCommand.printMembers (GROUP-INSTANCE-ID only when a member has one);
    ``--verbose`` adds CURRENT-EPOCH, CURRENT-ASSIGNMENT (``topic:0,1;other:2``),
    TARGET-EPOCH and TARGET-ASSIGNMENT."""
    base = _members_base(rows)
    if not verbose:
        return base
    current_w = max([20, *(len(r["assignment"]) for r in rows)])
    target_w = max([20, *(len(r["target_assignment"]) for r in rows)])
    fmt = f"{{:<15}} {{:<{current_w}}} {{:<15}} {{:<{target_w}}}"
    extra = [fmt.format("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                        "TARGET-ASSIGNMENT"),
             *(fmt.format(_cell(r["current_epoch"]), r["assignment"], _cell(r["target_epoch"]),
                          r["target_assignment"]) for r in rows)]
    return [base[0], *(f"{line} {more}" for line, more in zip(base[1:], extra, strict=True))]


def _members_base(rows: list[dict[str, Any]]) -> list[str]:
    static = any(r["group_instance_id"] for r in rows)
    columns = ["group", "consumer_id", *(["group_instance_id"] if static else []), "host",
               "client_id"]
    titles = {"group": "GROUP", "consumer_id": "CONSUMER-ID",
              "group_instance_id": "GROUP-INSTANCE-ID", "host": "HOST",
              "client_id": "CLIENT-ID"}
    widths = {c: max([15, *(len(_cell(r[c])) for r in rows)]) for c in columns}

    def line(values: dict[str, Any], last: Any) -> str:
        return " ".join(f"{_cell(values[c]):<{widths[c]}}" for c in columns) + \
            f" {_cell(last):<15}"

    return ["", line(titles, "#PARTITIONS"), *(line(r, r["partitions"]) for r in rows)]


def missing_group(group: str) -> str:
    """ConsumerGroupCommand's line for a group that does not exist (state Dead)."""
    return f"Error: Consumer group '{group}' does not exist."


def should_print(group: str, state: str, rows: int, err: TextIO) -> bool:
    """ConsumerGroupCommand.shouldPrintMemberState: the state's line on stderr (a group that
    does not exist, has no members or is rebalancing); True when there is a table to print
    (``rows`` rows, and the group exists)."""
    if state == "Dead":
        print(missing_group(group), file=err)
    elif state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=err)
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=err)
    return state != "Dead" and rows > 0


#: The states ``--list --state`` takes (Kafka's GroupState names of consumer groups).
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                "Assigning", "Reconciling")


def parse_states(text: str) -> set[str]:
    """``--list --state A,B``: state names in any case (GroupState.parse)."""
    by_lower = {s.lower(): s for s in GROUP_STATES}
    parsed = {by_lower.get(part.strip().lower(), part.strip()) for part in text.split(",")
              if part.strip()}
    if not parsed <= set(GROUP_STATES):
        raise UsageError(f"Invalid state list '{text}'. Valid states are: "
                         f"{', '.join(GROUP_STATES)}")
    return parsed


def states_table(groups: list[dict[str, str]], *, with_type: bool = False,
                 with_state: bool = True) -> list[str]:
    """ConsumerGroupService.printGroupInfo: GROUP, then TYPE (``--type``), then STATE
    (``--state``)."""
    fmt = f"{{:<{max([15, *(len(g['group']) for g in groups)]) + 10}}}"
    titles, keys = ["GROUP"], ["group"]
    for shown, title, key in ((with_type, "TYPE", "type"), (with_state, "STATE", "state")):
        if shown:
            fmt += " {:<20}"
            titles.append(title)
            keys.append(key)
    return [fmt.format(*titles),
            *(fmt.format(*(g[k] or "Unknown" for k in keys)) for g in groups)]


#: The types ``--list --type`` takes (GroupType names of consumer groups).
GROUP_TYPES = ("Classic", "Consumer")


def parse_types(text: str) -> set[str]:
    """``--list --type classic,consumer``: type names in any case (GroupType.parse)."""
    parsed = {part.strip().capitalize() for part in text.split(",") if part.strip()}
    if not parsed <= set(GROUP_TYPES):
        raise UsageError(f"Invalid types list '{text}'. Valid types are: "
                         f"{', '.join(GROUP_TYPES)}")
    return parsed


def state_table(group: str, node: tuple[int, str, int], described: Described,
                verbose: bool = False) -> list[str]:
    """ConsumerGroupCommand.printState; ``--verbose`` adds GROUP-EPOCH and
    TARGET-ASSIGNMENT-EPOCH (a consumer-protocol group's, ``-`` for a classic group)."""
    coordinator_text = f"{node[1]}:{node[2]} ({node[0]})"
    group_w, coord_w = max(15, len(group)), max(25, len(coordinator_text))
    strategy = described.protocol_data
    state, members = described.group_state, len(described.members)
    consumer = described.consumer
    if not verbose:
        fmt = f"{{:<{group_w}}} {{:<{coord_w}}} {{:<20}} {{:<15}} {{}}"
        return ["", fmt.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                               "#MEMBERS"),
                fmt.format(group, coordinator_text, strategy, state, members)]
    fmt = f"{{:<{group_w}}} {{:<{coord_w}}} {{:<20}} {{:<20}} {{:<15}} {{:<25}} {{}}"
    epochs = ((str(consumer.group_epoch), str(consumer.assignment_epoch))
              if consumer is not None else ("-", "-"))
    return ["", fmt.format("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                           "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"),
            fmt.format(group, coordinator_text, strategy or "-", state, *epochs, members)]


# ------------------------------------------------------------------------------- reset
def parse_datetime(text: str) -> int:
    """``--to-datetime``: ``YYYY-MM-DDTHH:mm:SS[.sss][zone]``, UTC without a zone, in ms."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"Error parsing timestamp. It does not conform to "
                         f"'yyyy-MM-ddTHH:mm:SS.sss': {text}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
    r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> int:
    """``--by-duration``: an ISO 8601 duration as Java's ``Duration.parse`` reads it
    (``PnDTnHnMn.nS``: ``PT15M``, ``P1DT2H``, ``PT0.5S``), in ms."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or match.group(3) == "T" or not any(
            match.group(i) for i in (2, 4, 5, 6)):
        raise UsageError(f"Error parsing duration '{text}': Text cannot be parsed to a "
                         "Duration (the form is PnDTnHnMn.nS, e.g. PT1H)")
    sign, days, _t, hours, minutes, seconds, fraction = match.groups()
    total = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
             + int(minutes or 0) * 60_000 + int(seconds or 0) * 1000)
    if fraction:
        millis = int((fraction + "000")[:3])
        total += -millis if (seconds or "").startswith("-") else millis
    return -total if sign == "-" else total


def reset_plan(path: str, group: str) -> dict[tuple[str, int], int]:
    """``--from-file``: the CSV --export writes, ``topic,partition,offset`` lines (one group)
    or ``group,topic,partition,offset`` lines (this group's rows are taken)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolError(f"{path}: {exc.strerror}") from None
    plan: dict[tuple[str, int], int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            if len(fields) == 3:
                plan[(fields[0], int(fields[1]))] = int(fields[2])
            elif len(fields) == 4:
                if fields[0] == group:
                    plan[(fields[1], int(fields[2]))] = int(fields[3])
            else:
                raise ValueError(line)
        except ValueError:
            raise ToolError(f"{path}:{number}: not a reset plan line (topic,partition,offset "
                            f"or group,topic,partition,offset): {line}") from None
    if not plan:
        raise ToolError(f"No reset plan for group {group} found in {path}")
    return plan


def export_csv(offsets: dict[tuple[str, int], int]) -> str:
    """ConsumerGroupCommand.exportOffsetsToCsv for one group: ``topic,partition,offset``
    lines (Kafka's println then adds an empty line)."""
    return "".join(f"{t},{p},{o}\n" for (t, p), o in sorted(offsets.items()))


def reset_partitions(conn: AdminConnection, ns: argparse.Namespace,
                     current: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    if ns.from_file is not None and not (ns.topic or ns.all_topics):
        return sorted(reset_plan(ns.from_file, ns.group[0]))
    if ns.all_topics:
        return sorted(current)
    chosen = []
    for item in ns.topic:
        topic, _, parts = item.partition(":")
        if parts:
            try:
                chosen += [(topic, int(p)) for p in parts.split(",")]
            except ValueError:
                raise UsageError(f"Invalid partitions in --topic {item}") from None
            continue
        (answer,) = metadata(conn, [topic]).topics
        check(answer.error_code, None, topic)
        chosen += [(topic, int(p.partition_index)) for p in answer.partitions]
    return sorted(chosen)


def new_offsets(conn: AdminConnection, ns: argparse.Namespace,
                partitions: list[tuple[str, int]], current: dict[tuple[str, int], int]
                ) -> dict[tuple[str, int], int]:
    earliest = list_offsets(conn, partitions, EARLIEST)
    latest = list_offsets(conn, partitions, LATEST)

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if ns.to_earliest:
        return {tp: earliest[tp] for tp in partitions}
    if ns.to_latest:
        return {tp: latest[tp] for tp in partitions}
    if ns.to_offset is not None:
        return {tp: clamp(tp, ns.to_offset) for tp in partitions}
    if ns.shift_by is not None:
        return {tp: clamp(tp, current.get(tp, latest[tp]) + ns.shift_by) for tp in partitions}
    if ns.to_datetime is not None or ns.by_duration is not None:
        moment = (parse_datetime(ns.to_datetime) if ns.to_datetime is not None
                  else int(time.time() * 1000) - parse_duration(ns.by_duration))
        at = list_offsets(conn, partitions, moment)
        return {tp: latest[tp] if at[tp] < 0 else at[tp] for tp in partitions}
    if ns.from_file is not None:
        plan = reset_plan(ns.from_file, ns.group[0])
        return {tp: clamp(tp, plan[tp]) for tp in partitions if tp in plan}
    return {tp: current.get(tp, latest[tp]) for tp in partitions}  # --to-current


def reset_table(group: str, offsets: dict[tuple[str, int], int]) -> list[str]:
    """ConsumerGroupCommand.printOffsetsToReset."""
    fmt = "{:<30} {:<30} {:<10} {:<15}"
    return ["", fmt.format("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
            *(fmt.format(group, t, p, o) for (t, p), o in sorted(offsets.items()))]


# ----------------------------------------------------------------------------- command
def check_options(ns: argparse.Namespace) -> None:
    if (ns.describe or ns.delete) and not (ns.group or ns.all_groups):
        raise UsageError("Option --describe and --delete need --group or --all-groups")
    if ns.reset_offsets:
        if len(ns.group) != 1:
            raise UsageError("Option --reset-offsets needs exactly one --group")
        if ns.topic and ns.all_topics or not (ns.topic or ns.all_topics or ns.from_file):
            raise UsageError("Option --reset-offsets needs one of --topic, --all-topics")
        if not (ns.to_earliest or ns.to_latest or ns.to_current or ns.to_datetime
                or ns.to_offset is not None or ns.shift_by is not None or ns.by_duration
                or ns.from_file):
            raise UsageError("Option --reset-offsets needs one of --to-earliest, --to-latest, "
                             "--to-current, --to-offset, --to-datetime, --by-duration, "
                             "--shift-by, --from-file")
        if ns.to_datetime is not None:
            parse_datetime(ns.to_datetime)
        if ns.by_duration is not None:
            parse_duration(ns.by_duration)
    if ns.delete_offsets and (len(ns.group) != 1 or not ns.topic):
        raise UsageError("Option --delete-offsets needs exactly one --group and at least "
                         "one --topic")
    if ns.export and not ns.reset_offsets:
        raise UsageError("Option --export goes with --reset-offsets")
    if ns.type is not None and not ns.list:
        raise UsageError("Option --type goes with --list")
    if ns.verbose and not ns.describe:
        raise UsageError("Option --verbose goes with --describe")
    if ns.state is not None and not (ns.list or ns.describe):
        raise UsageError("--state goes with --describe or --list")
    if ns.state and ns.describe:
        raise UsageError("--state takes no value with --describe")
    if (ns.members or ns.offsets) and not ns.describe:
        raise UsageError("--members, --state and --offsets go with --describe")
    if not ns.reset_offsets and (ns.all_topics or ns.execute or ns.dry_run
                                 or ns.topic and not ns.delete_offsets):
        raise UsageError("--topic, --all-topics, --dry-run and --execute go with "
                         "--reset-offsets")


def execute(ns: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    check_options(ns)
    json_out = ns.output == "json"
    settings = client_settings(ns.command_config, "groups")
    if ns.timeout is not None:
        if ns.timeout < 0:
            raise UsageError("--timeout must be at least 0")
        settings["request.timeout.ms"] = str(ns.timeout)
    with connect_with(ns.bootstrap_server, settings, "groups") as conn:
        groups = ns.group or ([g["group"] for g in list_groups(conn)] if ns.all_groups else [])
        if ns.list and (ns.state is not None or ns.type is not None):
            wanted = parse_states(ns.state or "")
            types = parse_types(ns.type or "")
            listed = [g for g in list_groups(conn) if (not wanted or g["state"] in wanted)
                      and (not types or g["type"] in types)]
            if json_out:
                emit_json(listed, out)
            else:
                print("\n".join(states_table(listed, with_type=ns.type is not None,
                                             with_state=ns.state is not None)), file=out)
            return
        if ns.list:
            listed = list_groups(conn)
            if json_out:
                emit_json(listed, out)
            for g in [] if json_out else listed:
                print(g["group"], file=out)
            return
        missing: list[str] = []  # described groups that do not exist: status 1
        if ns.describe and (ns.members or ns.state is not None):
            views: dict[str, Any] = {}
            for group in groups:
                node = find_coordinator(conn, group)
                with _coordinated(conn, group) as coord:
                    info = describe_group(coord, group)
                state = info.group_state
                if state == "Dead":
                    missing.append(group)
                if ns.members:
                    views[group] = members_rows(info)
                    lines = members_table(views[group], ns.verbose)
                else:
                    views[group] = {"coordinator": {"id": node[0], "host": node[1],
                                                    "port": node[2]},
                                    "assignment_strategy": info.protocol_data,
                                    "state": state, "members": len(info.members)}
                    if info.consumer is not None:
                        views[group].update(group_epoch=int(info.consumer.group_epoch),
                                            target_assignment_epoch=int(
                                                info.consumer.assignment_epoch))
                    lines = state_table(group, node, info, ns.verbose)
                if json_out:
                    continue
                if should_print(group, state, len(views[group]) if ns.members else 1, err):
                    print("\n".join(lines), file=out)
            if json_out:
                emit_json(views, out)
            _fail_if_missing(missing, json_out, err)
            return
        if ns.describe:
            described = {}
            for group in groups:
                with _coordinated(conn, group) as coord:
                    state, rows = describe_rows(coord, group)
                described[group] = {"state": state, "partitions": rows}
                if state == "Dead":
                    missing.append(group)
                if json_out:
                    continue
                if should_print(group, state, len(rows), err):
                    print("\n".join(describe_table(rows, ns.verbose)), file=out)
            if json_out:
                emit_json(described, out)
            _fail_if_missing(missing, json_out, err)
            return
        if ns.delete:
            deleted, failed = delete_groups(conn, groups)
            shown = ", ".join(f"'{g}'" for g in deleted)
            if json_out:
                emit_json({"deleted": deleted, "failed": failed}, out)
            elif not failed:
                print(f"Deletion of requested consumer groups ({shown}) was successful.",
                      file=out)
            elif deleted:
                print(f"These consumer groups were deleted successfully: {shown}", file=out)
            if failed:
                raise ToolError("; ".join(failed))
            return
        group = groups[0]
        if ns.delete_offsets:
            delete_offsets(conn, ns, group, out, err)
            return
        with _coordinated(conn, group) as coord:
            state = str(describe_group(coord, group).group_state)
            if state not in INACTIVE_STATES:
                raise ToolError(f"Assignments can only be reset if the group '{group}' is "
                                f"inactive, but the current state is {state}.")
            current = committed(coord, group)
            partitions = reset_partitions(conn, ns, current)
            offsets = new_offsets(conn, ns, partitions, current)
            if ns.execute:
                commit(coord, group, offsets)
            elif not ns.dry_run and not ns.export:
                print("WARN: No action will be performed as the --execute option is missing. "
                      "In a future major release, the default behavior of this command will "
                      "be to prompt the user before executing the reset rather than doing a "
                      "dry run. You should add the --dry-run option explicitly if you are "
                      "scripting this command and want to keep the current default behavior "
                      "without prompting.", file=err)
        if ns.export:
            print(export_csv(offsets), file=out)
        elif json_out:
            emit_json({"group": group, "executed": bool(ns.execute), "offsets": [
                {"topic": t, "partition": p, "offset": o}
                for (t, p), o in sorted(offsets.items())]}, out)
        else:
            print("\n".join(reset_table(group, offsets)), file=out)


#: Errors.message() of the errors OffsetDelete answers, as kafka-consumer-groups.sh prints them.
_OFFSET_DELETE_MESSAGES = {
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.invalid_group_id: "The configured groupId is invalid.",
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.group_subscribed_to_topic: "The consumer group is actively subscribed to the "
                                         "topic",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
}


def delete_offsets(conn: AdminConnection, ns: argparse.Namespace, group: str, out: TextIO,
                   err: TextIO) -> None:
    """ConsumerGroupService.deleteOffsets: OffsetDelete of the partitions of ``--topic``
    (``topic`` for all its partitions, ``topic:0,1`` for some), then the TOPIC PARTITION
    STATUS table. Status 1 when the request or a partition failed."""
    partitions: list[tuple[str, int]] = []
    results: dict[tuple[str, int], str | None] = {}
    for item in ns.topic:
        topic, sep, parts = item.partition(":")
        if sep:
            try:
                partitions += [(topic, int(p)) for p in parts.split(",")]
            except ValueError:
                raise UsageError(f"Invalid partition in topic arg '{item}'") from None
            continue
        (answer,) = metadata(conn, [topic]).topics
        if answer.error_code != ErrorCode.none:
            results[(topic, -1)] = _OFFSET_DELETE_MESSAGES.get(
                answer.error_code, ErrorCode(answer.error_code).name.upper())
            continue
        partitions += [(topic, int(p.partition_index)) for p in answer.partitions]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        by_topic.setdefault(topic, []).append(partition)
    top = ErrorCode.none
    with _coordinated(conn, group) as coord:
        request = Request(coord, OFFSET_DELETE)
        response = request.send(group_id=group, topics=tuple(
            request.nested("OffsetDeleteRequestTopic", name=topic, partitions=tuple(
                request.nested("OffsetDeleteRequestPartition", partition_index=p)
                for p in parts)) for topic, parts in by_topic.items()))
    top = ErrorCode(response.error_code)
    for topic in response.topics:
        for p in topic.partitions:
            code = ErrorCode(p.error_code)
            results[(str(topic.name), int(p.partition_index))] = (
                None if code == ErrorCode.none
                else _OFFSET_DELETE_MESSAGES.get(code, code.name.upper()))
    if top != ErrorCode.none:  # the whole request failed: every partition with it
        for tp in set(partitions) - set(results):
            results[tp] = _OFFSET_DELETE_MESSAGES.get(top, top.name.upper())
    failed = top != ErrorCode.none or any(v is not None for v in results.values())
    if ns.output == "json":
        emit_json({"group": group, "error": None if top == ErrorCode.none
                   else top.name.upper(), "partitions": [
                       {"topic": t, "partition": p if p >= 0 else None, "error": e}
                       for (t, p), e in sorted(results.items())]}, out)
        if failed:
            raise Reported("delete-offsets failed")
        return
    if top == ErrorCode.none and not failed:
        print(f"Request succeeded for deleting offsets from group {group}.", file=out)
    elif top in (ErrorCode.none, ErrorCode.group_subscribed_to_topic,
                 ErrorCode.topic_authorization_failed, ErrorCode.unknown_topic_or_partition):
        print("\nError: Encountered some partition-level error, see the follow-up details.",
              file=out)
    else:
        print(f"\nError: {_OFFSET_DELETE_MESSAGES.get(top, top.name.upper())}", file=out)
    topic_w = max([15, *(len(t) for t, _p in results)])
    fmt = f"\n{{:<{topic_w}}} {{:<10}} {{:<15}}"
    text = fmt.format("TOPIC", "PARTITION", "STATUS")
    for (t, p), error in sorted(results.items(), key=lambda item: f"{item[0][0]}{item[0][1]}"):
        text += fmt.format(t, p if p >= 0 else "-",
                           "Successful" if error is None else f"Error: {error}")
    print(text, file=out)
    if failed:
        raise Reported("delete-offsets failed")


def _fail_if_missing(missing: list[str], json_out: bool, err: TextIO) -> None:
    """``--describe`` of a group that does not exist: Kafka's error line (already printed in
    text mode, on stderr for JSON, whose document still says ``"Dead"``), then status 1 once
    every group asked for is described."""
    if not missing:
        return
    if json_out:
        for group in missing:
            print(missing_group(group), file=err)
    raise Reported(missing_group(missing[0]))


class _coordinated:  # noqa: N801 - used as a context manager like a function
    """The coordinator connection for a group, closed afterwards if it is a new one."""

    def __init__(self, conn: AdminConnection, group: str) -> None:
        self.conn = conn
        self.coord = coordinator(conn, group)

    def __enter__(self) -> AdminConnection:
        return self.coord

    def __exit__(self, *exc: object) -> None:
        if self.coord is not self.conn:
            self.coord.close()


def delete_groups(conn: AdminConnection, groups: list[str]) -> tuple[list[str], list[str]]:
    """DeleteGroups for each group, as ConsumerGroupService.deleteGroups: every group is tried
    (one that fails does not stop the others); the deleted groups and one reason per failure."""
    deleted, failed = [], []
    for group in groups:
        with _coordinated(conn, group) as coord:
            response = Request(coord, DELETE_GROUPS).send(groups_names=(group,))
            code = response.results[0].error_code
        if code == ErrorCode.none:
            deleted.append(group)
        elif code == ErrorCode.non_empty_group:
            failed.append(f"Deletion of consumer group '{group}' failed: the group is not "
                          "empty (NON_EMPTY_GROUP)")
        elif code == ErrorCode.group_id_not_found:
            failed.append(f"Deletion of consumer group '{group}' failed: the group does not "
                          "exist (GROUP_ID_NOT_FOUND)")
        else:
            failed.append(str(BrokerError(code, None, group)))
    return deleted, failed


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``trio_broker groups``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    errors = err if err is not None else sys.stderr
    return run(build_parser(), argv, lambda ns: execute(ns, output, errors), err)
