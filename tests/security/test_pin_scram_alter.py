"""AlterUserScramCredentials' per-user rules (Kafka's ScramControlManager), each pinned by an
answer over the wire: one change per user and mechanism, known mechanisms, 4096..16384
iterations, a salted password and a salt of 12 bytes or more, deletions only of existing credentials; and a user
whose change fails has none of its changes applied, while the other users' changes are."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import i8, i32

from tests.kafka_wire import WireClient
from trio_broker.security.scram import ScramStore

pytestmark = pytest.mark.timeout(30)

ALTER_SCRAM = 51
SHA256, SHA512 = 1, 2
SALT = os.urandom(16)
SALTED = hashlib.pbkdf2_hmac("sha256", b"pw", SALT, 8192)


def upsert(name: str, mechanism: int = SHA256, iterations: int = 8192, salt: bytes = SALT,
           salted: bytes = SALTED) -> ScramCredentialUpsertion:
    return ScramCredentialUpsertion(name=name, mechanism=i8(mechanism),
                                    iterations=i32(iterations), salt=salt,
                                    salted_password=salted)


async def alter(client: WireClient, deletions: tuple[Any, ...] = (),
                upsertions: tuple[Any, ...] = ()) -> dict[str, tuple[int, str | None]]:
    answer = await client.request(ALTER_SCRAM, 0, AlterUserScramCredentialsRequest(
        deletions=deletions, upsertions=upsertions))
    return {r.user: (int(r.error_code), r.error_message) for r in answer.results}


async def test_each_rule_fails_its_user_only(start_broker: Any) -> None:
    running = await start_broker({"listeners": "PLAINTEXT://127.0.0.1:0"})
    client = await WireClient.connect(running.port)
    try:
        assert await alter(client, upsertions=(upsert("kept", SHA512),)) == {"kept": (0, None)}
        answers = await alter(client, deletions=(
            ScramCredentialDeletion(name="kept", mechanism=i8(SHA256)),  # not there: 91
            ScramCredentialDeletion(name="weird", mechanism=i8(7)),
        ), upsertions=(
            upsert("twice"), upsert("twice"),
            upsert("low", iterations=4095), upsert("high", iterations=16385),
            upsert("edge-low", iterations=4096), upsert("edge-high", SHA512, iterations=16384),
            upsert("no-salted", salted=b""), upsert("short-salt", salt=b"x" * 11),
            upsert("salt-12", salt=b"x" * 12),
            upsert("", SHA512), upsert("weird2", mechanism=0),
            upsert("ok"),
        ))
        assert answers == {
            "kept": (E.resource_not_found, "Attempt to delete a user credential that does not exist"),
            "weird": (E.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            "twice": (E.duplicate_resource,
                      "A user credential cannot be altered twice in the same request"),
            "low": (E.unacceptable_credential, "Too few iterations"),
            "high": (E.unacceptable_credential, "Too many iterations"),
            "edge-low": (0, None), "edge-high": (0, None), "salt-12": (0, None),
            "no-salted": (E.unacceptable_credential, "Salted password must not be empty"),
            "short-salt": (E.unacceptable_credential, "Salt must be at least 12 bytes"),
            "": (E.unacceptable_credential, "Username must not be empty"),
            "weird2": (E.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            "ok": (0, None),
        }
        # Only the users without an error changed; "kept" keeps its credential.
        assert ScramStore(running.data_dir).describe() == {
            "kept": {"SCRAM-SHA-512": 8192}, "edge-low": {"SCRAM-SHA-256": 4096},
            "edge-high": {"SCRAM-SHA-512": 16384}, "salt-12": {"SCRAM-SHA-256": 8192},
            "ok": {"SCRAM-SHA-256": 8192}}

        # One failing change of a user drops that user's other changes, not another user's.
        answers = await alter(client, deletions=(
            ScramCredentialDeletion(name="kept", mechanism=i8(SHA512)),
        ), upsertions=(upsert("kept", SHA256, iterations=100), upsert("ok", SHA512)))
        assert answers == {"kept": (E.unacceptable_credential, "Too few iterations"),
                           "ok": (0, None)}
        stored = ScramStore(running.data_dir).describe()
        assert stored["kept"] == {"SCRAM-SHA-512": 8192}
        assert stored["ok"] == {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 8192}

        # A deletion of an existing credential, alone for its user, applies.
        assert await alter(client, deletions=(
            ScramCredentialDeletion(name="kept", mechanism=i8(SHA512)),)) == {"kept": (0, None)}
        assert "kept" not in ScramStore(running.data_dir).describe()
    finally:
        await client.aclose()
