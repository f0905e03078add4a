"""The SCRAM credentials file (``ScramStore._write``), with real files: readable and writable by
the broker's user only (0600, whatever the umask: it holds salted passwords, as Kafka keeps them
only in the metadata log), created with its data directory, replaced whole, and read back by
another store (the ``trio_broker scram`` command and the running broker share it). Each test
kills mutants that survived ``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from trio_broker.security.scram import FILE_NAME, ScramStore, credential_from_password

pytestmark = pytest.mark.timeout(30)

MECH = "SCRAM-SHA-256"


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: the mode the file gets is the one it is created with, nothing masked off."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_credentials_file_is_the_owners_only(tmp_path: Path, open_umask: None) -> None:
    store = ScramStore(tmp_path)
    store.alter([("alice", MECH, credential_from_password(MECH, "pw", 4096))], [])
    assert mode(tmp_path / FILE_NAME) == 0o600
    # replaced on every change: the new file is 0600 too
    store.alter([("bob", MECH, credential_from_password(MECH, "pw2", 4096))], [])
    assert mode(tmp_path / FILE_NAME) == 0o600
    assert sorted(os.listdir(tmp_path)) == [FILE_NAME]  # no temporary file left beside it


def test_a_missing_data_directory_is_created_with_the_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "not" / "yet" / "there"
    store = ScramStore(data_dir)
    cred = credential_from_password(MECH, "pw", 4096)
    store.alter([("alice", MECH, cred)], [])
    store.alter([], [("alice", MECH)])  # the directory exists now: written again all the same
    assert (data_dir / FILE_NAME).is_file()
    assert ScramStore(data_dir).describe() == {}


def test_what_one_store_writes_another_reads(tmp_path: Path) -> None:
    alice = credential_from_password(MECH, "pw", 4096, salt=b"s" * 16)
    bob = credential_from_password("SCRAM-SHA-512", "pw2", 8192, salt=b"t" * 16)
    ScramStore(tmp_path).alter([("bob", "SCRAM-SHA-512", bob), ("alice", MECH, alice)], [])
    reader = ScramStore(tmp_path)
    assert reader.get("alice", MECH) == alice
    assert reader.get("bob", "SCRAM-SHA-512") == bob
    assert reader.describe() == {"alice": {MECH: 4096}, "bob": {"SCRAM-SHA-512": 8192}}
    text = (tmp_path / FILE_NAME).read_text(encoding="utf-8")
    document = json.loads(text)
    assert document["version"] == 1
    assert list(document["users"]) == ["alice", "bob"]  # sorted: the same users, the same file


def test_a_user_name_outside_ascii_is_stored_and_read_back(tmp_path: Path) -> None:
    cred = credential_from_password(MECH, "pw", 4096)
    ScramStore(tmp_path).alter([("zoë", MECH, cred)], [])
    assert ScramStore(tmp_path).get("zoë", MECH) == cred
