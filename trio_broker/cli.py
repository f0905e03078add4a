"""The ``trio_broker`` command: ``run`` the broker, ``analyze`` its logs, set client ``quotas``,
manage ``acls`` and ``scram`` users, print the ``config`` docs, and the operator tools that talk
to any Kafka-protocol broker (``topics``, ``groups``, ``configs``, ``users``, ``produce``,
``consume``, ``cluster``, ``get-offsets``, ``delete-records``, ``broker-api-versions``,
``log-dirs``, ``features``, ``leader-election``, the perf tests; docs/cli.md)."""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import signal
import sys
from collections.abc import Sequence

import attrs
import trio

from . import __version__
from .command import INTERRUPTED
from .config import (
    INT_MAX,
    BrokerConfig,
    ConfigError,
    config_reference_markdown,
    load_config,
    load_properties_file,
    parse_override,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio_broker",
        description="A Kafka-compatible broker on Trio. Configured with Kafka's own keys.",
    )
    parser.add_argument("--version", action="version", version=f"trio_broker {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", help="start the broker (default: PLAINTEXT://localhost:9092)",
        description="Start the broker. With no options it serves PLAINTEXT://localhost:9092 and "
                    "keeps its data in /tmp/trio-broker-logs (log.dir), like Kafka's defaults.")
    run.add_argument("--config", "-c", metavar="FILE",
                     help="a Kafka-style server.properties file")
    run.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                     help="set one configuration key (repeatable; wins over --config)")
    for name, tool in _TOOL_MODULES.items():
        # Each tool parses its own arguments; this entry only lists it in the help.
        commands.add_parser(name, add_help=False, help=tool.help)
    commands.add_parser("config-docs", help="print the configuration reference (Markdown)")
    return parser


def build_config(config_file: str | None, overrides: Sequence[str]) -> BrokerConfig:
    sources: list[dict[str, str]] = []
    if config_file:
        sources.append(load_properties_file(config_file))
    sources.append(dict(parse_override(item) for item in overrides))
    return load_config(*sources)


def _skip_optional_test_imports() -> None:
    """kio tries ``import hypothesis`` to register test strategies; in a development install
    that import alone costs 0.5-2.5 s of start-up. The broker process never needs it."""
    if "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


@attrs.frozen
class _Tool:
    """A subcommand with its own argument parser (Kafka tools' flags): where its entry point
    is (``module`` or ``module:function``, default ``main``) and its line in ``--help``."""

    target: str
    help: str


#: Subcommands with their own argument parsers, by name; imported on demand by ``main``.
_TOOL_MODULES = {
    "analyze": _Tool(
        ".analytics.cli",
        "run the PySpark analytics over broker logs (trio_broker analyze --help)"),
    "quotas": _Tool(
        ".tools.quotas",
        "describe or alter client quotas of a running broker, with kafka-configs.sh's "
        "options (trio_broker quotas --help)"),
    "acls": _Tool(
        ".tools.acls",
        "add, remove or list ACLs of a running broker, with kafka-acls.sh's options "
        "(trio_broker acls --help)"),
    "scram": _Tool(
        ".tools.scram",
        "add, delete or describe SCRAM users in a data directory, offline, with "
        "kafka-configs.sh's options (trio_broker scram --help)"),
    "topics": _Tool(
        ".tools.topics",
        "create, list, describe, alter or delete topics, with kafka-topics.sh's options"),
    "groups": _Tool(
        ".tools.groups",
        "list, describe, delete consumer groups and reset their offsets, with "
        "kafka-consumer-groups.sh's options"),
    "configs": _Tool(
        ".tools.configs",
        "describe or alter topic, broker and client quota configs, with "
        "kafka-configs.sh's options"),
    "produce": _Tool(
        ".tools.console:produce_main",
        "produce lines of stdin to a topic (kafka-console-producer.sh, kcat -P)"),
    "consume": _Tool(
        ".tools.console:consume_main",
        "write records of a topic to stdout (kafka-console-consumer.sh, kcat -C)"),
    "cluster": _Tool(
        ".tools.cluster",
        "describe the cluster: brokers, listeners, API versions (trio_broker cluster "
        "describe)"),
    "transactions": _Tool(
        ".tools.transactions",
        "list, describe, find hanging and abort transactions (kafka-transactions.sh)"),
    "users": _Tool(
        ".tools.configs:users_main",
        "add, delete, describe SCRAM credentials and quotas of users over the wire "
        "(kafka-configs.sh --entity-type users)"),
    "get-offsets": _Tool(
        ".tools.offsets:get_offsets_main",
        "print partitions' earliest, latest or by-time offsets (kafka-get-offsets.sh)"),
    "delete-records": _Tool(
        ".tools.offsets:delete_records_main",
        "delete partitions' records before an offset (kafka-delete-records.sh)"),
    "broker-api-versions": _Tool(
        ".tools.brokers:broker_api_versions_main",
        "print each broker's API versions (kafka-broker-api-versions.sh)"),
    "log-dirs": _Tool(
        ".tools.brokers:log_dirs_main",
        "describe brokers' log directories and partition sizes (kafka-log-dirs.sh)"),
    "features": _Tool(
        ".tools.brokers:features_main",
        "describe or change feature flags (kafka-features.sh)"),
    "leader-election": _Tool(
        ".tools.brokers:leader_election_main",
        "elect preferred or unclean partition leaders (kafka-leader-election.sh)"),
    "metadata-quorum": _Tool(
        ".tools.brokers:metadata_quorum_main",
        "describe a KRaft metadata quorum (kafka-metadata-quorum.sh; Apache Kafka only)"),
    "producer-perf-test": _Tool(
        ".tools.perf:producer_perf_main",
        "measure produce throughput and latency (kafka-producer-perf-test.sh)"),
    "consumer-perf-test": _Tool(
        ".tools.perf:consumer_perf_main",
        "measure consume throughput (kafka-consumer-perf-test.sh)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    _skip_optional_test_imports()
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _TOOL_MODULES:
        # Imported on demand: `run` must not pay for pyspark or the admin tools.
        module, _, function = _TOOL_MODULES[args_list[0]].target.partition(":")
        tool = importlib.import_module(module, __package__)
        return int(getattr(tool, function or "main")(args_list[1:]))
    parser = _parser()
    args = parser.parse_args(args_list)
    if args.command == "config-docs":
        print(config_reference_markdown())
        return 0
    if args.command != "run":
        parser.print_help()
        return 2
    try:
        config = build_config(args.config, args.override)
    except ConfigError as exc:
        print(f"trio_broker: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        return run_broker(config)
    except KeyboardInterrupt:
        # Ctrl-C before the broker listens for signals (while it is still importing its
        # modules): nothing is open yet, so stop without a traceback, with the shell's status
        # for an interrupt. From the start of the event loop on, Ctrl-C is a clean shutdown.
        print("trio_broker: interrupted during start-up", file=sys.stderr)
        return INTERRUPTED


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard one; returns ``(before, now)``.

    What the JVM does for Kafka (HotSpot's ``MaxFDLimit``, on by default): every segment holds
    a file and every connection a socket, and a soft limit of 1,024 (a common default) runs out
    at a few hundred partitions. Lowered hard limits are the operator's to raise."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError):
            return soft, soft
        return soft, hard
    return soft, soft


#: Descriptors the broker holds besides its connections, before any partition is opened: the
#: listening sockets, the event loop's epoll and wake-up pipe, the log file, the data
#: directory's lock, standard streams (11 on a fresh broker; the rest is margin).
BASE_FILE_DESCRIPTORS = 64


@attrs.frozen
class ConnectionCapacity:
    """How many connections the open-file limit leaves room for, beside the configured cap.

    Every connection holds one descriptor (its socket). ``max_connections`` is the broker's
    effective cap: ``max.connections``, or the sum of every listener's
    ``listener.name.<l>.max.connections`` when all of them are set and smaller; INT_MAX (the
    default) means none, and the operating system's limit is the only one, as in Kafka.
    """

    open_file_limit: int
    max_connections: int

    @property
    def connections_possible(self) -> int:
        """Connections that fit under the limit (before partitions take their descriptors);
        INT_MAX without a limit."""
        if self.open_file_limit < 0:  # RLIM_INFINITY
            return INT_MAX
        return max(0, self.open_file_limit - BASE_FILE_DESCRIPTORS)

    @property
    def short(self) -> bool:
        """A configured cap the limit cannot honour: accepts would fail (EMFILE) before the
        cap is reached. An unlimited cap is not short: it is the operator's choice to let the
        operating system decide, which is Kafka's default."""
        return self.max_connections < INT_MAX and self.max_connections > self.connections_possible


def connection_capacity(config: BrokerConfig, open_file_limit: int) -> ConnectionCapacity:
    """The broker's connection cap set against ``open_file_limit`` (the soft RLIMIT_NOFILE)."""
    per_listener = sum(config.listener_setting(endpoint.listener_name, "max.connections")
                       for endpoint in config.endpoints)
    return ConnectionCapacity(open_file_limit, min(config.max_connections, per_listener))


def check_connection_capacity(config: BrokerConfig, open_file_limit: int) -> ConnectionCapacity:
    """Log the open-file limit at start-up; warn (event and a line on stderr) when it is too
    low for the configured ``max.connections``. The broker starts either way: Kafka makes no
    such check, a ``server.properties`` written for a production host must still start on a
    laptop, and the acceptor survives running out (it waits and retries, docs/decisions.md)."""
    from .observability.log import emit

    capacity = connection_capacity(config, open_file_limit)
    fields = {"limit": open_file_limit, "max_connections": capacity.max_connections,
              "connections_possible": capacity.connections_possible}
    emit("open_file_limit", **fields)
    if capacity.short:
        emit("open_file_limit_short", **fields)
        print(f"trio_broker: warning: max.connections is {capacity.max_connections} but the "
              f"open-file limit ({open_file_limit}) leaves room for about "
              f"{capacity.connections_possible} connections; raise it (ulimit -n, systemd's "
              f"LimitNOFILE) or lower max.connections", file=sys.stderr)
    return capacity


def _only_error(exc: BaseException) -> BaseException:
    """The exception inside Trio's single-member exception groups (a start-up failure of the
    broker's task arrives wrapped by each nursery it passed)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def check_data_dir(config: BrokerConfig) -> None:
    """The log directory must be a directory this process can write (created if missing);
    otherwise a :class:`ConfigError` naming ``log.dirs`` (or ``log.dir``), not an OSError
    from deep inside storage."""
    key = "log.dirs" if config.log_dirs else "log.dir"
    path = config.data_dir
    if path.exists() and not path.is_dir():
        raise ConfigError(key, str(path), "must be a directory (this is a file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(key, str(path), "must be a directory that can be created "
                          f"({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(key, str(path), "must be a writable directory")


#: The interpreter's GIL switch interval in the broker process (docs/architecture.md).
GIL_SWITCH_INTERVAL_S = 0.001


def run_broker(config: BrokerConfig) -> int:
    """Run until SIGINT or SIGTERM, then shut down in order; exit status 0 on a clean stop."""
    from .observability.log import configure_logging, emit
    from .server.allocator import keep_large_buffers_in_heap
    from .server.app import BrokerApp

    keep_large_buffers_in_heap()
    files_before, files_now = raise_open_file_limit()
    # A worker thread running Python (a record walk, partition creation) hands the GIL back
    # every switch interval; the event loop needs it after each system call, so 5 ms
    # (Python's default) per hand-back adds up to tens of milliseconds per loop pass.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)

    try:
        check_data_dir(config)
        try:
            writer = configure_logging(
                broker_id=config.node_id, file=config.logging_file, fmt=config.logging_format,
                level=config.logging_level, max_bytes=config.logging_file_max_bytes,
                backup_count=config.logging_file_backup_count,
                traffic=config.logging_traffic)
        except OSError as failed:
            raise ConfigError("logging.file", config.logging_file,
                              f"cannot be opened for writing ({failed.strerror or failed})"
                              ) from None
    except ConfigError as refused:
        print(f"trio_broker: configuration error: {refused}", file=sys.stderr)
        return 2
    if files_now != files_before:
        emit("open_file_limit_raised", before=files_before, limit=files_now)
    check_connection_capacity(config, files_now)

    async def serve() -> None:
        app = BrokerApp(config)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)
                # What start-up built lives as long as the broker: out of the collector's
                # reach, so its full collections (native, holding the GIL) stay short.
                gc.freeze()
                listening = ", ".join(
                    f"{b.name}://{b.endpoint.host or '0.0.0.0'}:{b.port}" for b in app.listeners)
                print(f"trio_broker {__version__} listening on {listening} "
                      f"(advertised {', '.join(str(e) for e in app.advertised.values())}); "
                      f"data in {config.data_dir}", file=sys.stderr, flush=True)
                async for _signum in signals:
                    await app.shutdown()
                    break

    from .storage.errors import StorageError

    try:
        trio.run(serve)
    except Exception as raised:
        exc = _only_error(raised)
        if isinstance(exc, ConfigError):  # a keystore or JAAS entry that cannot be used
            print(f"trio_broker: configuration error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, (OSError, StorageError, RuntimeError)):
            # Port in use, data directory locked by another broker, meta.properties mismatch,
            # too few file descriptors for the partitions on disk.
            hint = (" (raise the open-file limit: ulimit -n)"
                    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)
                    else "")
            print(f"trio_broker: cannot start: {exc}{hint}", file=sys.stderr)
            return 1
        raise
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
