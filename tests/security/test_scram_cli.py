"""``trio_broker scram``: kafka-configs.sh's options, offline, on a data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trio_broker.security.scram import ScramStore
from trio_broker.tools.scram import parse_add_config


def scram(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trio_broker", "scram", *args],
                          capture_output=True, text=True, timeout=60)


def test_add_describe_delete(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    added = scram("--data-dir", data, "--alter", "--entity-type", "users", "--entity-name",
                  "alice", "--add-config",
                  "SCRAM-SHA-256=[iterations=8192,password=pw=1],SCRAM-SHA-512=[password=x]")
    assert added.returncode == 0, added.stderr
    assert "Completed updating config for user alice." in added.stdout
    described = scram("--data-dir", data, "--describe")
    assert described.stdout.strip() == (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    assert ScramStore(Path(data)).get("alice", "SCRAM-SHA-256") is not None
    deleted = scram("--data-dir", data, "--alter", "--entity-name", "alice",
                    "--delete-config", "SCRAM-SHA-256")
    assert deleted.returncode == 0
    assert ScramStore(Path(data)).describe() == {"alice": {"SCRAM-SHA-512": 4096}}
    assert (Path(data) / "scram-credentials.json").stat().st_mode & 0o077 == 0


def test_config_file_gives_the_data_directory(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(f"log.dirs={tmp_path / 'd'}\n")
    result = scram("--config", str(properties), "--alter", "--entity-name", "admin",
                   "--add-config", "SCRAM-SHA-512=[password=s3cret]")
    assert result.returncode == 0, result.stderr
    assert ScramStore(tmp_path / "d").describe() == {"admin": {"SCRAM-SHA-512": 4096}}


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations"):
        parse_add_config("SCRAM-SHA-256=[iterations=10,password=x]")
    with pytest.raises(ValueError, match="password"):
        parse_add_config("SCRAM-SHA-256=[iterations=8192]")
    with pytest.raises(ValueError):
        parse_add_config("SCRAM-SHA-1=[password=x]")


@pytest.mark.parametrize("content", ["garbage", '{"users": 5}',
                                     '{"users": {"u": {"SCRAM-SHA-256": {"salt": "x"}}}}'])
def test_an_unreadable_credentials_file_is_one_line_and_kept(tmp_path: Path,
                                                             content: str) -> None:
    """A damaged credentials file: the tool and the broker stop with one line naming it (they
    ended in a traceback), and an --alter never writes over the users it could not read."""
    path = tmp_path / "scram-credentials.json"
    path.write_text(content)
    for args in (["--describe"], ["--alter", "--entity-name", "u",
                                  "--add-config", "SCRAM-SHA-256=[password=x]"]):
        result = scram("--data-dir", str(tmp_path), *args)
        assert result.returncode == 1
        assert result.stderr.startswith(
            f"trio_broker scram: cannot read the SCRAM credentials in {path}")
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert path.read_text() == content
    broker = subprocess.run(
        [sys.executable, "-m", "trio_broker", "run", "--override", f"log.dirs={tmp_path}",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
        capture_output=True, text=True, timeout=60)
    assert broker.returncode == 1
    assert broker.stderr.startswith(
        f"trio_broker: cannot start: cannot read the SCRAM credentials in {path}")
    assert len(broker.stderr.splitlines()) == 1
