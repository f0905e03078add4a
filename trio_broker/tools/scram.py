"""``trio_broker scram``: SCRAM users in a data directory, without a client or a running broker.

The options are kafka-configs.sh's, so the first admin is created the way Kafka's docs create
one (``kafka-storage.sh format --add-scram`` / ``kafka-configs.sh --alter``)::

    trio_broker scram --data-dir /var/lib/trio-broker --alter --entity-type users \\
        --entity-name admin --add-config 'SCRAM-SHA-512=[iterations=8192,password=s3cret]'
    trio_broker scram --config server.properties --describe

The credentials go to ``scram-credentials.json`` in the data directory (``log.dirs``); a running
broker notices the change before its next SCRAM authentication. Once a broker runs, the same
changes can be made with any client's AlterUserScramCredentials (kafka-configs.sh
--bootstrap-server, confluent-kafka's AdminClient).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import ConfigError, load_config, load_properties_file, parse_override
from ..security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramStore,
    UnreadableCredentials,
    credential_from_password,
)

_ENTRY = re.compile(r"\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[([^\]]*)\]\s*(?:,|$)")


def parse_add_config(text: str) -> dict[str, tuple[int, str]]:
    """``SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]`` →
    ``{mechanism: (iterations, password)}`` (iterations default 4096, as kafka-configs.sh)."""
    result: dict[str, tuple[int, str]] = {}
    position = 0
    text = text.strip()
    while position < len(text):
        match = _ENTRY.match(text, position)
        if match is None:
            raise ValueError("expected SCRAM-SHA-256=[iterations=N,password=P] or "
                             f"SCRAM-SHA-512=[...], got {text[position:]!r}")
        fields = {}
        for item in match.group(2).split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"expected key=value inside [...], got {item!r}")
            fields[key.strip()] = value
        if "password" not in fields:
            raise ValueError(f"{match.group(1)} needs password=...")
        unknown = set(fields) - {"password", "iterations"}
        if unknown:
            raise ValueError(f"unknown {', '.join(sorted(unknown))} in {match.group(1)}")
        iterations = int(fields.get("iterations", MIN_ITERATIONS))
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
        result[match.group(1)] = (iterations, fields["password"])
        position = match.end()
    if not result:
        raise ValueError("nothing to add")
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio_broker scram",
        description="Add, delete or describe SCRAM credentials in a data directory (offline), "
                    "with kafka-configs.sh's options.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", metavar="DIR", help="the broker's data directory (log.dirs)")
    where.add_argument("--config", "-c", metavar="FILE",
                       help="the broker's server.properties (its log.dirs is used)")
    parser.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                        help="with --config: a configuration key (as trio_broker run takes it)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add or delete credentials")
    action.add_argument("--describe", action="store_true", help="list users and mechanisms")
    parser.add_argument("--entity-type", default="users", choices=["users"])
    parser.add_argument("--entity-name", metavar="USER")
    parser.add_argument("--add-config", metavar="SPEC",
                        help="'SCRAM-SHA-256=[iterations=8192,password=...]' (comma-separated)")
    parser.add_argument("--delete-config", metavar="MECHANISMS",
                        help="'SCRAM-SHA-256' or 'SCRAM-SHA-256,SCRAM-SHA-512'")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv))
    try:
        if args.data_dir:
            data_dir = Path(args.data_dir)
        else:
            sources = [load_properties_file(args.config),
                       dict(parse_override(item) for item in args.override)]
            data_dir = load_config(*sources).data_dir
    except ConfigError as exc:
        print(f"trio_broker scram: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(parser, args, ScramStore(data_dir))
    except UnreadableCredentials as exc:
        print(f"trio_broker scram: {exc}", file=sys.stderr)
        return 1


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, store: ScramStore) -> int:
    if args.describe:
        described = store.describe()
        for user, mechanisms in sorted(described.items()):
            if args.entity_name and user != args.entity_name:
                continue
            infos = ", ".join(f"{m}=iterations={i}" for m, i in sorted(mechanisms.items()))
            print(f"SCRAM credential configs for user-principal '{user}' are {infos}")
        if args.entity_name and args.entity_name not in described:
            print(f"trio_broker scram: user {args.entity_name!r} has no SCRAM credentials",
                  file=sys.stderr)
            return 1
        return 0
    if not args.entity_name:
        parser.error("--alter needs --entity-name")
    if not args.add_config and not args.delete_config:
        parser.error("--alter needs --add-config or --delete-config")
    try:
        added = parse_add_config(args.add_config) if args.add_config else {}
    except ValueError as exc:
        parser.error(f"--add-config: {exc}")
    deleted = [m.strip() for m in (args.delete_config or "").split(",") if m.strip()]
    unknown = [m for m in deleted if m not in MECHANISMS]
    if unknown:
        parser.error(f"--delete-config: unknown mechanism {', '.join(unknown)}")
    user = args.entity_name
    store.alter([(user, m, credential_from_password(m, password, iterations))
                 for m, (iterations, password) in added.items()],
                [(user, m) for m in deleted])
    print(f"Completed updating config for user {user}.")
    return 0
