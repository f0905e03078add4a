"""``trio_broker quotas``: kafka-configs.sh's options, checks and output, against a real broker.

Three groups:

* pure unit tests of option parsing, Kafka's checks and messages, and the output format;
* ``ip`` entities end to end (what the broker supports on its own): an in-process broker on a real
  socket, the command run in a worker thread, plus the installed command as a subprocess;
* ``user`` / ``client-id`` / ``<user, client-id>`` entities end to end, and examples/quotas.py
  (class ``TestUserAndClientEntities``), written against Kafka's behaviour: they need the broker
  side of issue 10 (user/client-id entities in AlterClientQuotas/DescribeClientQuotas, client
  quotas enforced).
"""

from __future__ import annotations

import functools
import io
import math
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_broker.tools.admin_client import (
    AdminConnection,
    UnsupportedVersion,
    parse_bootstrap,
)
from trio_broker.tools.quotas import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    CommandError,
    UsageError,
    alter_done_line,
    check_options,
    describe_line,
    filter_components,
    java_double,
    main,
    parse_add_config,
    parse_java_double,
    parse_options,
)

BOOTSTRAP = ["--bootstrap-server", "127.0.0.1:9092"]


def checked(*args: str) -> Any:
    opts = parse_options([*BOOTSTRAP, *args])
    check_options(opts)
    return opts


# ================================================================ options and checks (unit)
@pytest.mark.parametrize(("args", "types", "names"), [
    (["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
      "--entity-name", "app"], ("users", "clients"), ("alice", "app")),
    # names pair with types by position, whatever the option order
    (["--entity-type", "users", "--entity-type", "clients", "--entity-name", "alice",
      "--entity-default"], ("users", "clients"), ("alice", "")),
    (["--entity-type", "users", "--entity-default", "--entity-type", "clients",
      "--entity-name", "app"], ("users", "clients"), ("", "app")),
    (["--entity-type", "ips", "--entity-default"], ("ips",), ("",)),
    # shorthands: Kafka lists the flags client, user, ip, then the -defaults flags
    (["--user", "alice", "--client", "app"], ("clients", "users"), ("app", "alice")),
    (["--user-defaults", "--client", "app"], ("clients", "users"), ("app", "")),
    (["--client-defaults", "--user", "alice"], ("users", "clients"), ("alice", "")),
    (["--ip", "10.0.0.1"], ("ips",), ("10.0.0.1",)),
    (["--ip-defaults"], ("ips",), ("",)),
])
def test_entity_types_and_names_in_kafkas_order(args: list[str], types: tuple[str, ...],
                                                names: tuple[str, ...]) -> None:
    opts = checked("--alter", "--add-config", "producer_byte_rate=1"
                   if types[0] != "ips" else "connection_creation_rate=1", *args)
    assert (opts.entity_types, opts.entity_names) == (types, names)


@pytest.mark.parametrize(("args", "message"), [
    ([], "Command must include exactly one action: --describe, --alter"),
    (["--alter", "--describe", "--user", "a"],
     "Command must include exactly one action: --describe, --alter"),
    (["--describe", "--user", "a", "--add-config", "producer_byte_rate=1"],
     'Option "[describe]" can\'t be used with option "[add-config]"'),
    (["--describe", "--user", "a", "--delete-config", "producer_byte_rate"],
     'Option "[describe]" can\'t be used with option "[delete-config]"'),
])
def test_usage_errors(args: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        checked(*args)
    assert str(raised.value) == message


@pytest.mark.parametrize(("args", "message"), [
    (["--describe", "--entity-type", "users", "--entity-type", "users"],
     "Duplicate entity type(s) specified: users"),
    (["--describe", "--user", "a", "--user-defaults"], "Duplicate entity type(s) specified: users"),
    (["--describe", "--entity-type", "topics"],
     "Invalid entity type topics, the entity type must be one of users, clients, ips with a "
     "--bootstrap-server argument"),
    (["--describe"], "At least one entity type must be specified"),
    (["--describe", "--entity-default"], "At least one entity type must be specified"),
    (["--describe", "--entity-type", "users", "--entity-type", "ips"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--describe", "--entity-type", "users", "--client", "app"],
     "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
    (["--describe", "--entity-type", "ips", "--entity-name", "not..an..ip"],
     "The entity name for ips must be a valid IP or resolvable host, but it is: not..an..ip"),
    (["--describe", "--ip", "not..an..ip"],
     "The entity name for ips must be a valid IP or resolvable host, but it is: not..an..ip"),
    (["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "An entity-name or default entity must be specified with --alter of users, clients, "
     "brokers or ips"),
    (["--alter", "--user", "a", "--add-config", "producer_byte_rate=1", "--add-config-file",
      "f.properties"], "Only one of --add-config or --add-config-file must be specified"),
    (["--alter", "--user", "a"],
     "At least one of --add-config, --add-config-file, or --delete-config must be specified "
     "with --alter"),
    # both a name and the default for one type
    (["--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-default",
      "--add-config", "producer_byte_rate=1"],
     "An entity name must be specified for every entity type"),
    (["--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "alice",
      "--add-config", "producer_byte_rate=1"],
     "An entity name must be specified for every entity type"),
    (["--describe", "--user", "a", "--user", "b"],
     "Found multiple arguments for option user, but you asked for only one"),
    (["--describe", "--user", "a", "--bogus"], "bogus is not a recognized option"),
    (["--describe", "--entity-type", "users", "--entity-name"],
     "Option entity-name requires an argument"),
])
def test_argument_errors_as_kafka_words_them(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as raised:
        checked(*args)
    assert str(raised.value) == message
    assert not isinstance(raised.value, UsageError)


def test_bootstrap_server_is_required() -> None:
    with pytest.raises(UsageError, match="You must specify --bootstrap-server."):
        check_options(parse_options(["--describe", "--user", "a"]))


def test_describe_filter_components() -> None:
    """Kafka's zipAll: missing names match any entity of the type; a default matches the
    default entity; more names than types is an error."""
    assert filter_components(["users", "clients"], ["alice"]) == [
        ("user", MATCH_EXACT, "alice"), ("client-id", MATCH_ANY, None)]
    assert filter_components(["users", "clients"], ["", "app"]) == [
        ("user", MATCH_DEFAULT, None), ("client-id", MATCH_EXACT, "app")]
    assert filter_components(["ips"], []) == [("ip", MATCH_ANY, None)]
    with pytest.raises(CommandError, match="^More entity names specified than entity types$"):
        filter_components(["users"], ["alice", ""])


def test_add_config_parsing() -> None:
    assert parse_add_config("producer_byte_rate=1024,consumer_byte_rate = 2048") == {
        "producer_byte_rate": "1024", "consumer_byte_rate": "2048"}
    # commas inside [...] group one value; brackets are dropped; a trailing comma is ignored
    assert parse_add_config("a=[1,2],b=3,") == {"a": "1,2", "b": "3"}
    assert parse_add_config("a=") == {"a": ""}
    invalid = ('Invalid entity config: all configs to be added must be in the format "key=val" '
               'or  "key=[val1,val2]" to group values which contain commas.')
    for text in ("producer_byte_rate", "a=1=2", "", ",a=1"):
        with pytest.raises(CommandError) as raised:
            parse_add_config(text)
        assert str(raised.value) == invalid, text
    with pytest.raises(CommandError, match="^Invalid character found for config key: a b$"):
        parse_add_config("a b=1")


def test_java_double_parsing_and_printing() -> None:
    assert [parse_java_double(t) for t in ("1024", " 1e3 ", "2.5d", ".5", "+7.", "-1E-2f")] == [
        1024.0, 1000.0, 2.5, 0.5, 7.0, -0.01]
    assert math.isnan(parse_java_double("NaN") or 0.0)
    for text in ("abc", "1_000", "0x10", "", "1e", "inf"):
        assert parse_java_double(text) is None, text
    cases = {1024.0: "1024.0", 2048.5: "2048.5", 0.001: "0.001", 0.0001: "1.0E-4",
             1e7: "1.0E7", 10485760.0: "1.048576E7", 9999999.0: "9999999.0", 0.0: "0.0",
             -3.0: "-3.0", 123456789.25: "1.2345678925E8", float("inf"): "Infinity"}
    assert {value: java_double(value) for value in cases} == cases


def test_output_lines() -> None:
    assert describe_line({"client-id": "app", "user": "alice"},
                         [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]) == (
        "Quota configs for user-principal 'alice', client-id 'app' are "
        "producer_byte_rate=1024.0, consumer_byte_rate=2048.0")
    assert describe_line({"user": None, "client-id": "app"}, [("request_percentage", 50.0)]) == (
        "Quota configs for the default user-principal, client-id 'app' are "
        "request_percentage=50.0")
    assert describe_line({"ip": None}, [("connection_creation_rate", 5.0)]) == (
        "Quota configs for the default ip are connection_creation_rate=5.0")
    assert alter_done_line(["users", "clients"], ["alice", "app"]) == (
        "Completed updating config for user alice.")
    assert alter_done_line(["clients", "users"], ["app", "alice"]) == (
        "Completed updating config for client app.")
    assert alter_done_line(["ips"], ["127.0.0.1"]) == "Completed updating config for ip 127.0.0.1."
    assert alter_done_line(["users"], [""]) == (
        "Completed updating default config for users in the cluster.")


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap("a:1, [::1]:9092") == [("a", 1), ("::1", 9092)]
    with pytest.raises(ValueError, match="Invalid url in bootstrap.servers: nohost"):
        parse_bootstrap("nohost")


def test_version_negotiation_picks_the_highest_common_version() -> None:
    conn = AdminConnection(socket.socket(), 1.0, "test")
    try:
        conn.broker_versions = {48: (0, 5), 49: (0, 0)}
        assert conn.version_for(48) == 1  # kio (this client) encodes v0-v1
        assert conn.version_for(49) == 0
        with pytest.raises(UnsupportedVersion,
                           match="^The broker does not support ALTER_USER_SCRAM_CREDENTIALS$"):
            conn.version_for(51)
        conn.broker_versions = {48: (2, 3)}
        with pytest.raises(UnsupportedVersion, match="broker v2-v3, client v0-v1"):
            conn.version_for(48)
    finally:
        conn.close()


def test_no_arguments_prints_usage_and_fails() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main([], out=out, err=err) == 1
    assert "--entity-type" in err.getvalue() and out.getvalue() == ""
    assert main(["--help"], out=out, err=err) == 0
    assert "--add-config" in out.getvalue()


# ================================================================= ip entities, end to end
async def quotas(bootstrap: str, *args: str) -> tuple[int, list[str], str]:
    """Run ``trio_broker quotas`` in a worker thread: (status, stdout lines, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    run = functools.partial(main, ["--bootstrap-server", bootstrap, *args], out=out, err=err)
    with trio.fail_after(30):
        code = await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    return code, out.getvalue().splitlines(), err.getvalue()


async def test_ip_quotas_alter_describe_delete(broker: Any) -> None:
    bootstrap = broker.bootstrap
    assert await quotas(bootstrap, "--alter", "--entity-type", "ips", "--entity-name",
                        "10.1.2.3", "--add-config", "connection_creation_rate=25") == (
        0, ["Completed updating config for ip 10.1.2.3."], "")
    assert await quotas(bootstrap, "--alter", "--ip", "10.1.2.4", "--add-config",
                        "connection_creation_rate=20000000") == (
        0, ["Completed updating config for ip 10.1.2.4."], "")
    assert await quotas(bootstrap, "--describe", "--ip", "10.1.2.3") == (
        0, ["Quota configs for ip '10.1.2.3' are connection_creation_rate=25.0"], "")
    code, lines, _ = await quotas(bootstrap, "--describe", "--entity-type", "ips")
    assert code == 0 and sorted(lines) == [
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=25.0",
        "Quota configs for ip '10.1.2.4' are connection_creation_rate=2.0E7"]
    # an existing entity changes in place
    assert (await quotas(bootstrap, "--alter", "--ip", "10.1.2.3", "--add-config",
                         "connection_creation_rate=[30]"))[0] == 0

    assert await quotas(bootstrap, "--alter", "--ip", "10.1.2.4", "--delete-config",
                        "connection_creation_rate") == (
        0, ["Completed updating config for ip 10.1.2.4."], "")
    assert await quotas(bootstrap, "--describe", "--entity-type", "ips") == (
        0, ["Quota configs for ip '10.1.2.3' are connection_creation_rate=30.0"], "")
    assert await quotas(bootstrap, "--describe", "--ip", "10.1.2.4") == (0, [], "")


async def test_ip_default_entity(broker: Any) -> None:
    bootstrap = broker.bootstrap
    assert await quotas(bootstrap, "--alter", "--entity-type", "ips", "--entity-default",
                        "--add-config", "connection_creation_rate=100") == (
        0, ["Completed updating default config for ips in the cluster."], "")
    assert (await quotas(bootstrap, "--alter", "--ip", "10.0.0.9", "--add-config",
                         "connection_creation_rate=5"))[0] == 0
    assert await quotas(bootstrap, "--describe", "--ip-defaults") == (
        0, ["Quota configs for the default ip are connection_creation_rate=100.0"], "")
    code, lines, _ = await quotas(bootstrap, "--describe", "--entity-type", "ips")
    assert code == 0 and sorted(lines) == [
        "Quota configs for ip '10.0.0.9' are connection_creation_rate=5.0",
        "Quota configs for the default ip are connection_creation_rate=100.0"]
    assert await quotas(bootstrap, "--alter", "--ip-defaults", "--delete-config",
                        "connection_creation_rate") == (
        0, ["Completed updating default config for ips in the cluster."], "")
    assert await quotas(bootstrap, "--describe", "--entity-type", "ips", "--entity-default") == (
        0, [], "")


async def test_ip_alter_errors(broker: Any) -> None:
    bootstrap = broker.bootstrap
    # checked by the tool before anything is sent
    assert await quotas(bootstrap, "--alter", "--ip", "10.0.0.1", "--add-config",
                        "producer_byte_rate=5") == (
        1, [], "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
                "Unexpected config names: producer_byte_rate\n")
    assert await quotas(bootstrap, "--alter", "--ip", "10.0.0.1", "--delete-config",
                        "connection_creation_rate") == (
        1, [], "Invalid config(s): connection_creation_rate\n")
    assert await quotas(bootstrap, "--alter", "--ip", "10.0.0.1", "--add-config",
                        "connection_creation_rate=fast") == (
        1, [], "Cannot parse quota configuration value for connection_creation_rate: fast\n")
    # refused by the broker: Kafka's error name, non-zero status, nothing changed
    args = ("--alter", "--ip", "10.0.0.1", "--add-config", "connection_creation_rate=-5")
    code, lines, err = await quotas(bootstrap, *args)
    assert (code, lines) == (1, [])
    first, second = err.splitlines()
    assert first == f"Error while executing config command with args '--bootstrap-server " \
                    f"{bootstrap} {' '.join(args)}'"
    assert second.startswith("INVALID_REQUEST: ")
    assert await quotas(bootstrap, "--describe", "--entity-type", "ips") == (0, [], "")


async def test_unreachable_broker() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        code, lines, err = await quotas(f"127.0.0.1:{port}", "--describe", "--ip-defaults")
    assert (code, lines) == (1, [])
    assert err.startswith("Error while executing config command with args")
    assert f"127.0.0.1:{port}" in err and "Broker may not be available" in err


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trio_broker", "quotas", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_installed_command_against_a_broker_process(broker_process: Any) -> None:
    """``trio_broker quotas`` as a user runs it, against ``trio_broker run``."""
    process = broker_process()
    server = ["--bootstrap-server", process.bootstrap]
    done = run_command(*server, "--alter", "--ip", "127.0.0.5", "--add-config",
                       "connection_creation_rate=7")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, "Completed updating config for ip 127.0.0.5.\n", "")
    described = run_command(*server, "--describe", "--entity-type", "ips")
    assert (described.returncode, described.stdout) == (
        0, "Quota configs for ip '127.0.0.5' are connection_creation_rate=7.0\n")
    process.restart()  # the broker keeps its quotas
    assert run_command(*server, "--describe", "--ip", "127.0.0.5").stdout == described.stdout
    refused = run_command(*server, "--describe", "--entity-type", "brokers")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "Invalid entity type brokers" in refused.stderr
    assert process.stop() == 0


# ====================================== user / client-id entities (need the h-quota broker side)
def values_of(line: str) -> tuple[str, set[str]]:
    """A describe line split into its entity part and its set of ``key=value`` (Kafka prints the
    values of an entity in hash-map order, so tests do not depend on it)."""
    entity, sep, values = line.partition(" are ")
    assert sep, line
    return entity, set(values.split(", "))


class TestUserAndClientEntities:
    """Kafka's behaviour for ``users`` / ``clients`` / ``<users, clients>`` entities. These need
    the broker to accept user and client-id entities (issue 10's broker side, branch h-quota)."""

    async def test_client_id_quota(self, broker: Any) -> None:
        bootstrap = broker.bootstrap
        assert await quotas(bootstrap, "--alter", "--add-config",
                            "producer_byte_rate=1024,consumer_byte_rate=2048",
                            "--entity-type", "clients", "--entity-name", "app") == (
            0, ["Completed updating config for client app."], "")
        code, lines, err = await quotas(bootstrap, "--describe", "--entity-type", "clients",
                                        "--entity-name", "app")
        assert (code, err, len(lines)) == (0, "", 1)
        assert values_of(lines[0]) == ("Quota configs for client-id 'app'", {
            "producer_byte_rate=1024.0", "consumer_byte_rate=2048.0"})
        assert await quotas(bootstrap, "--alter", "--client", "app", "--delete-config",
                            "consumer_byte_rate") == (
            0, ["Completed updating config for client app."], "")
        assert await quotas(bootstrap, "--describe", "--client", "app") == (
            0, ["Quota configs for client-id 'app' are producer_byte_rate=1024.0"], "")
        # removing the last key removes the entity
        assert (await quotas(bootstrap, "--alter", "--client", "app", "--delete-config",
                             "producer_byte_rate"))[0] == 0
        assert await quotas(bootstrap, "--describe", "--entity-type", "clients") == (0, [], "")

    async def test_user_and_combined_entities_are_described_strictly(self, broker: Any) -> None:
        bootstrap = broker.bootstrap
        assert await quotas(bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                            "alice", "--entity-type", "clients", "--entity-name", "app",
                            "--add-config", "producer_byte_rate=4096") == (
            0, ["Completed updating config for user alice."], "")
        assert await quotas(bootstrap, "--alter", "--user", "alice", "--add-config",
                            "request_percentage=50") == (
            0, ["Completed updating config for user alice."], "")
        # --user then --client: Kafka lists the client flag first, and names it
        assert await quotas(bootstrap, "--alter", "--user", "bob", "--client", "app",
                            "--add-config", "consumer_byte_rate=100") == (
            0, ["Completed updating config for client app."], "")

        assert await quotas(bootstrap, "--describe", "--entity-type", "users", "--entity-name",
                            "alice", "--entity-type", "clients", "--entity-name", "app") == (
            0, ["Quota configs for user-principal 'alice', client-id 'app' are "
                "producer_byte_rate=4096.0"], "")
        # a users filter alone matches user-only entities (strict), not <user, client-id> ones
        assert await quotas(bootstrap, "--describe", "--entity-type", "users") == (
            0, ["Quota configs for user-principal 'alice' are request_percentage=50.0"], "")
        code, lines, _ = await quotas(bootstrap, "--describe", "--entity-type", "users",
                                      "--entity-type", "clients")
        assert code == 0 and sorted(lines) == [
            "Quota configs for user-principal 'alice', client-id 'app' are "
            "producer_byte_rate=4096.0",
            "Quota configs for user-principal 'bob', client-id 'app' are "
            "consumer_byte_rate=100.0"]
        assert await quotas(bootstrap, "--describe", "--entity-type", "clients") == (0, [], "")

    async def test_default_entities(self, broker: Any) -> None:
        bootstrap = broker.bootstrap
        assert await quotas(bootstrap, "--alter", "--entity-type", "users", "--entity-default",
                            "--add-config", "producer_byte_rate=1000") == (
            0, ["Completed updating default config for users in the cluster."], "")
        assert await quotas(bootstrap, "--alter", "--client-defaults", "--add-config",
                            "consumer_byte_rate=2000") == (
            0, ["Completed updating default config for clients in the cluster."], "")
        assert await quotas(bootstrap, "--alter", "--entity-type", "users", "--entity-default",
                            "--entity-type", "clients", "--entity-default", "--add-config",
                            "controller_mutation_rate=10") == (
            0, ["Completed updating default config for users in the cluster."], "")
        assert await quotas(bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                            "alice", "--entity-type", "clients", "--entity-default",
                            "--add-config", "request_percentage=25.5") == (
            0, ["Completed updating config for user alice."], "")

        assert await quotas(bootstrap, "--describe", "--user-defaults") == (
            0, ["Quota configs for the default user-principal are producer_byte_rate=1000.0"], "")
        assert await quotas(bootstrap, "--describe", "--entity-type", "clients",
                            "--entity-default") == (
            0, ["Quota configs for the default client-id are consumer_byte_rate=2000.0"], "")
        code, lines, _ = await quotas(bootstrap, "--describe", "--entity-type", "users",
                                      "--entity-type", "clients")
        assert code == 0 and sorted(lines) == [
            "Quota configs for the default user-principal, the default client-id are "
            "controller_mutation_rate=10.0",
            "Quota configs for user-principal 'alice', the default client-id are "
            "request_percentage=25.5"]

    async def test_errors(self, broker: Any) -> None:
        bootstrap = broker.bootstrap
        assert await quotas(bootstrap, "--alter", "--client", "app", "--add-config",
                            "producer_byte_rate=10,retention.ms=5") == (
            1, [], "Only quota configs can be added for 'clients' using --bootstrap-server. "
                    "Unexpected config names: Set(retention.ms)\n")
        assert await quotas(bootstrap, "--alter", "--user", "alice", "--delete-config",
                            "nope") == (
            1, [], "Only quota and SCRAM credential configs can be deleted for 'users' using "
                    "--bootstrap-server. Unexpected config names: Buffer(nope)\n")
        assert (await quotas(bootstrap, "--alter", "--client", "app", "--add-config",
                             "producer_byte_rate=10"))[0] == 0
        assert await quotas(bootstrap, "--alter", "--client", "app", "--delete-config",
                            "producer_byte_rate,request_percentage") == (
            1, [], "Invalid config(s): request_percentage\n")
        # the broker's check (KRaft's ClientQuotaControlManager): byte rates are whole numbers
        code, lines, err = await quotas(bootstrap, "--alter", "--client", "app", "--add-config",
                                        "producer_byte_rate=1.5")
        assert (code, lines) == (1, [])
        assert err.splitlines()[1] == (
            "INVALID_REQUEST: producer_byte_rate cannot be a fractional value.")
        assert await quotas(bootstrap, "--describe", "--client", "app") == (
            0, ["Quota configs for client-id 'app' are producer_byte_rate=10.0"], "")


    def test_example_caps_a_producer(self, broker_process: Any) -> None:
        """examples/quotas.py: 2 MB at a 400 KiB/s producer_byte_rate takes about 5 s (Kafka's
        throttle spreads it out; accepted within a factor of 2) and librdkafka reports throttle
        events. Two 1 s windows (``quota.window.num=2``) so the Rate's warm-up is 1 s, not 10."""
        process = broker_process({"quota.window.num": "2", "quota.window.size.seconds": "1"})
        example = Path(__file__).resolve().parents[1] / "examples" / "quotas.py"
        done = subprocess.run(
            [sys.executable, str(example), "--bootstrap", process.bootstrap, "--client-id",
             "capped", "--rate", "409600", "--megabytes", "2"],
            capture_output=True, text=True, timeout=90, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "  Completed updating config for client capped." in done.stdout.splitlines()
        produced = re.search(r"produced (\d+) bytes in ([\d.]+) s", done.stdout)
        throttled = re.search(r"throttle events: (\d+)", done.stdout)
        assert produced and throttled, done.stdout
        expected = int(produced.group(1)) / 409600
        assert expected / 2 <= float(produced.group(2)) <= expected * 2, done.stdout
        assert int(throttled.group(1)) >= 1
        # the example removes its quota again
        described = run_command("--bootstrap-server", process.bootstrap, "--describe",
                                "--client", "capped")
        assert (described.returncode, described.stdout) == (0, "")
