"""``trio_broker cluster describe``: the cluster id, controller and brokers (DescribeCluster,
Metadata), the contacted node's listeners (DescribeConfigs) and its API table (ApiVersions),
the latter in kafka-broker-api-versions.sh's format."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from kio.index import UnknownEntity
from kio.schema.index import api_key_map

from .. import __version__
from .admin_client import AdminConnection, client_versions
from .common import (
    Parser,
    Request,
    add_connection_options,
    check,
    connect,
    emit_json,
    kafka_text,
    run,
)
from .topics import metadata

DESCRIBE_CONFIGS, DESCRIBE_CLUSTER = 32, 60
BROKER_RESOURCE = 4
LISTENER_KEYS = ("listeners", "advertised.listeners", "inter.broker.listener.name",
                 "listener.security.protocol.map")

EXAMPLES = """\
  trio_broker cluster describe --bootstrap-server localhost:9092
  trio_broker cluster describe --bootstrap-server localhost:9092 --output json | jq .apis
"""

#: Kafka's ApiKeys names where CamelCase of kio's snake_case name differs.
_NAMES = {"list_offsets": "ListOffsets", "sasl_handshake": "SaslHandshake"}


def api_name(api_key: int) -> str:
    """``ApiKeys.name`` (``Produce``, ``ApiVersions``) from kio's ``produce``, ..."""
    snake = api_key_map.get(api_key)
    if snake is None:
        return f"UNKNOWN({api_key})"
    return _NAMES.get(snake, "".join(part.capitalize() for part in snake.split("_")))


def usable(api_key: int, low: int, high: int) -> int | None:
    try:
        ours = client_versions(api_key)
    except Exception:  # kio has no schema for the key
        return None
    best = min(high, ours[1])
    return best if best >= max(low, ours[0]) else None


def api_table(conn: AdminConnection) -> list[dict[str, Any]]:
    table = []
    for key, (low, high) in sorted(conn.broker_versions.items()):
        table.append({"api_key": key, "name": api_name(key), "min_version": low,
                      "max_version": high, "usable": usable(key, low, high)})
    return table


def api_lines(node: str, table: list[dict[str, Any]]) -> list[str]:
    """kafka-broker-api-versions.sh: ``Produce(0): 0 to 9 [usable: 9]`` per API."""
    rows = []
    for api in table:
        use = f"usable: {api['usable']}" if api["usable"] is not None else "unusable"
        rows.append(f"\t{api['name']}({api['api_key']}): {api['min_version']} to "
                    f"{api['max_version']} [{use}]")
    return [f"{node} -> (", ",\n".join(rows), ")"]


def describe(conn: AdminConnection) -> dict[str, Any]:
    meta = metadata(conn, [])
    cluster_id, controller = meta.cluster_id, int(meta.controller_id)
    brokers = [{"id": int(b.node_id), "host": b.host, "port": int(b.port), "rack": b.rack}
               for b in meta.brokers]
    if DESCRIBE_CLUSTER in conn.broker_versions:
        try:
            response = Request(conn, DESCRIBE_CLUSTER).send(
                include_cluster_authorized_operations=False, endpoint_type=1)
        except UnknownEntity:
            response = None
        if response is not None:
            check(response.error_code, response.error_message, "DescribeCluster")
            cluster_id, controller = response.cluster_id, int(response.controller_id)
            brokers = [{"id": int(b.broker_id), "host": b.host, "port": int(b.port),
                        "rack": b.rack} for b in response.brokers]
    peer = conn._sock.getpeername()
    node = next((b for b in brokers if b["port"] == peer[1]), brokers[0] if brokers else None)
    listeners: dict[str, str | None] = {}
    if node is not None:
        request = Request(conn, DESCRIBE_CONFIGS)
        response = request.send(resources=(request.nested(
            "DescribeConfigsResource", resource_type=BROKER_RESOURCE,
            resource_name=str(node["id"]), configuration_keys=LISTENER_KEYS),),
            include_synonyms=False, include_documentation=False)
        (result,) = response.results
        check(result.error_code, result.error_message, f"broker {node['id']}")
        listeners = {c.name: c.value for c in result.configs if c.name in LISTENER_KEYS}
    return {"cluster_id": cluster_id, "controller_id": controller, "brokers": brokers,
            "node": node, "listeners": listeners, "apis": api_table(conn),
            "tool_version": __version__}


def describe_text(info: dict[str, Any]) -> list[str]:
    node = info["node"]
    lines = [f"ClusterId:       {kafka_text(info['cluster_id'])}",
             f"ControllerId:    {info['controller_id']}",
             f"Brokers:         {len(info['brokers'])}"]
    for b in info["brokers"]:
        lines.append(f"  {b['host']}:{b['port']} (id: {b['id']} rack: {kafka_text(b['rack'])})")
    if node is not None:
        lines.append(f"Node:            {node['id']}")
        for key in LISTENER_KEYS:
            if key in info["listeners"]:
                lines.append(f"  {key}={kafka_text(info['listeners'][key])}")
        lines += api_lines(f"{node['host']}:{node['port']} (id: {node['id']} rack: "
                           f"{kafka_text(node['rack'])})", info["apis"])
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = Parser("trio_broker cluster",
                    "Describe the cluster: id, controller, brokers, the contacted node's "
                    "listeners and its API versions (kafka-metadata-quorum.sh describe, "
                    "kafka-broker-api-versions.sh).", EXAMPLES)
    parser.add_argument("action", choices=("describe",), help="what to do")
    add_connection_options(parser)
    return parser


def execute(ns: argparse.Namespace, out: TextIO) -> None:
    with connect(ns, "cluster") as conn:
        info = describe(conn)
    if ns.output == "json":
        emit_json(info, out)
    else:
        print("\n".join(describe_text(info)), file=out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run ``trio_broker cluster``; 0 on success, 1 on a failure, 2 on a bad command line."""
    output = out if out is not None else sys.stdout
    return run(build_parser(), argv, lambda ns: execute(ns, output), err)
