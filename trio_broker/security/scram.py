"""SCRAM credentials (RFC 5802/7677) as Kafka keeps them: salt, stored key, server key and
iterations per user and mechanism, stored durably in the data directory.

The file (``scram-credentials.json``) is replaced atomically (write, fsync, rename) on every
change. A running broker re-reads it when its modification time changes, so
``trio_broker scram`` can add users while the broker runs. No Trio import: the broker calls the
writers in a worker thread, the command line directly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from pathlib import Path

import attrs

from ..storage.durable import write_durably

FILE_NAME = "scram-credentials.json"

#: Kafka's ScramMechanism: name, hash, wire type (AlterUserScramCredentials' int8).
MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_TYPE = {code: name for name, (_hash, code) in MECHANISMS.items()}
#: Kafka's limits (ScramMechanism.minIterations, AlterUserScramCredentials' maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Shortest salt accepted (scramp's minimum; Kafka's own tools make 16 to 26 bytes).
MIN_SALT_BYTES = 12


@attrs.frozen
class ScramCredential:
    """One user's credential for one mechanism (Kafka's ScramCredential)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple ``scramp``'s server asks its lookup function for."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def credential_from_salted(mechanism: str, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials sends (the client salts) turned into a stored credential."""
    digest = MECHANISMS[mechanism][0]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str, iterations: int,
                             salt: bytes | None = None) -> ScramCredential:
    """Salt and hash a password (what ``kafka-configs.sh --add-config`` does client-side)."""
    salt = salt if salt is not None else secrets.token_bytes(32)
    digest = MECHANISMS[mechanism][0]
    salted = hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)
    return credential_from_salted(mechanism, salt, salted, iterations)


def _encode(cred: ScramCredential) -> dict[str, object]:
    b64 = base64.b64encode
    return {"salt": b64(cred.salt).decode(), "stored_key": b64(cred.stored_key).decode(),
            "server_key": b64(cred.server_key).decode(), "iterations": cred.iterations}


def _decode(data: dict[str, object]) -> ScramCredential:
    b64 = base64.b64decode
    return ScramCredential(b64(str(data["salt"])), b64(str(data["stored_key"])),
                           b64(str(data["server_key"])), int(str(data["iterations"])))


class UnreadableCredentials(RuntimeError):
    """The credentials file exists but is not one this store wrote (damaged, hand-edited)."""


class ScramStore:
    """The credentials of one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._loaded_mtime: int | None = -1

    def _mtime(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def _refresh(self) -> None:
        mtime = self._mtime()
        if mtime == self._loaded_mtime:
            return
        users: dict[str, dict[str, ScramCredential]] = {}
        if mtime is not None:
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                for user, mechs in raw.get("users", {}).items():
                    users[user] = {mech: _decode(cred) for mech, cred in mechs.items()
                                   if mech in MECHANISMS}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                # As the ACLs: never go on as if the users were gone (nor write over them).
                raise UnreadableCredentials(
                    f"cannot read the SCRAM credentials in {self.path}: {exc!r}") from None
        self._users = users
        self._loaded_mtime = mtime

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """The credential SCRAM authentication checks against (None: unknown user)."""
        with self._lock:
            self._refresh()
            return self._users.get(user, {}).get(mechanism)

    def describe(self) -> dict[str, dict[str, int]]:
        """``{user: {mechanism: iterations}}`` (what DescribeUserScramCredentials reports)."""
        with self._lock:
            self._refresh()
            return {user: {m: c.iterations for m, c in mechs.items()}
                    for user, mechs in self._users.items() if mechs}

    def alter(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]]) -> None:
        """Apply upserts and deletions together and store them durably before returning."""
        with self._lock:
            self._refresh()
            users = {user: dict(mechs) for user, mechs in self._users.items()}
            for user, mechanism in deletions:
                users.get(user, {}).pop(mechanism, None)
            for user, mechanism, cred in upserts:
                users.setdefault(user, {})[mechanism] = cred
            users = {user: mechs for user, mechs in users.items() if mechs}
            self._write(users)
            self._users = users
            self._loaded_mtime = self._mtime()

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        text = json.dumps({"version": 1, "users": {
            user: {m: _encode(c) for m, c in sorted(mechs.items())}
            for user, mechs in sorted(users.items())}}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_durably(self.path, text, mode=0o600)  # credentials: the owner's only
