"""``trio_broker acls`` option handling (no broker needed: these fail before connecting)."""

from __future__ import annotations

import io

import pytest

from trio_broker.cli import main as cli_main
from trio_broker.server.acl import AclOperation
from trio_broker.tools.acls import entry_text, main, parse_operation, pattern_text


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(args), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("args", "message"), [
    (("--bootstrap-server", "h:1"), "Command must include exactly one action"),
    (("--bootstrap-server", "h:1", "--add", "--list"), "exactly one action"),
    (("--add", "--topic", "t"), "--bootstrap-server must be specified"),
    (("--bootstrap-server", "h:1", "--add", "--allow-principal", "User:a"),
     "You must provide at least one resource"),
    (("--bootstrap-server", "h:1", "--add", "--topic", "t"),
     "You must specify one of: --allow-principal, --deny-principal"),
    (("--bootstrap-server", "h:1", "--add", "--allow-principal", "alice", "--topic", "t"),
     "no colon is present"),
    (("--bootstrap-server", "h:1", "--add", "--allow-principal", "User:a", "--consumer",
      "--topic", "t"), "With --consumer you must specify a --topic and a --group"),
    (("--bootstrap-server", "h:1", "--add", "--allow-principal", "User:a", "--idempotent",
      "--topic", "t"), "--idempotent option is only available if --producer is set"),
    (("--bootstrap-server", "h:1", "--list", "--allow-principal", "User:a"),
     "Option --list does not accept"),
    (("--bootstrap-server", "h:1", "--nope"), "unrecognized arguments"),
])
def test_option_errors(args: tuple[str, ...], message: str) -> None:
    status, _, err = run(*args)
    assert status == 1
    assert message in err


def test_operation_names() -> None:
    assert parse_operation("Read") is AclOperation.READ
    assert parse_operation("DescribeConfigs") is AclOperation.DESCRIBE_CONFIGS
    assert parse_operation("idempotent_write") is AclOperation.IDEMPOTENT_WRITE
    assert parse_operation("ALL") is AclOperation.ALL


def test_kafka_acls_output_format() -> None:
    from trio_broker.server.acl import PatternType, PermissionType, ResourceType

    assert pattern_text(ResourceType.TOPIC, "t", PatternType.LITERAL) == \
        "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert pattern_text(ResourceType.ANY, None, PatternType.ANY) == \
        "ResourcePattern(resourceType=ANY, name=<any>, patternType=ANY)"
    assert entry_text("User:a", "*", AclOperation.READ, PermissionType.ALLOW) == \
        "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"


def test_help_and_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run("--help")
    assert status == 0 and "--allow-principal" in out and "--resource-pattern-type" in out
    assert cli_main(["acls", "--version"]) == 0
    assert "trio_broker" in capsys.readouterr().out


def test_unreachable_broker() -> None:
    status, _, err = run("--bootstrap-server", "127.0.0.1:1", "--list")
    assert status == 1
    assert "Error while executing ACL command" in err


def test_command_config_security_protocol(tmp_path: object) -> None:
    from pathlib import Path

    config = Path(str(tmp_path)) / "client.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    status, _, err = run("--bootstrap-server", "127.0.0.1:1", "--list", "--command-config",
                         str(config))
    assert status == 1
    assert "sasl.mechanism=GSSAPI is not supported" in err
