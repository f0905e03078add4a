"""The broker's authorizer: the ACL index, its file in the data directory, and audit events.

Kafka's StandardAuthorizer keeps ACLs in the metadata log; here they live in ``acls.json`` in the
data directory, rewritten whole on every change (temporary file, fsync, rename, fsync of the
directory), so a crash leaves either the old or the new set, never a torn file. A change is
applied to the in-memory index at once (the next request sees it) and written before the
CreateAcls / DeleteAcls response leaves.

Decisions follow :mod:`trio_broker.server.acl`. Audit logging follows Kafka's authorizer logger:
a denial is logged at INFO (``authorization_denied``) unless the caller asked not to (Kafka's
``logIfDenied=false``, e.g. the topics a Metadata request for all topics silently omits); an
allowed decision is logged at DEBUG (``authorization_allowed``) only when ``logging.level`` is
DEBUG.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..config import BrokerConfig
from ..observability.log import emit
from ..storage.durable import DurableFile
from .acl import (
    AclBinding,
    AclIndex,
    AclOperation,
    Decision,
    ResourceType,
    parse_super_users,
    sort_key,
)

ACLS_FILE = "acls.json"


def host_of(peer: str) -> str:
    """The IP of a ``ip:port`` peer (IPv6 without brackets), the ACL host it is matched with."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")


class Authorizer:
    """ACL authorization for one broker (None in the broker when authorization is off)."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.path = data_dir / ACLS_FILE
        self._file = DurableFile(self.path)
        self.index = AclIndex(super_users=parse_super_users(config.super_users),
                              allow_if_no_acl=config.allow_everyone_if_no_acl_found)
        self._log_allowed = config.logging_level == "DEBUG"

    @classmethod
    def from_config(cls, data_dir: Path, config: BrokerConfig) -> Authorizer | None:
        """The authorizer ``authorizer.class.name`` asks for, or None when it is empty."""
        return cls(data_dir, config) if config.authorizer_class_name else None

    # ---------------------------------------------------------------- decisions
    def authorize(self, principal: str, peer: str, op: AclOperation, rt: ResourceType,
                  name: str, *, log_if_denied: bool = True) -> bool:
        host = host_of(peer)
        decision = self.index.decide(principal, host, op, rt, name)
        if decision.allowed:
            if self._log_allowed:
                emit("authorization_allowed", principal=principal, host=host,
                     operation=op.name, resource_type=rt.name, resource_name=name,
                     reason=decision.reason, acl=_rule(decision))
        elif log_if_denied:
            emit("authorization_denied", principal=principal, host=host, operation=op.name,
                 resource_type=rt.name, resource_name=name, reason=decision.reason,
                 acl=_rule(decision))
        return decision.allowed

    def authorized_operations(self, principal: str, peer: str, rt: ResourceType,
                              name: str) -> int:
        return self.index.authorized_operations(principal, host_of(peer), rt, name)

    def allowed_on_some(self, principal: str, peer: str, op: AclOperation,
                        rt: ResourceType) -> bool:
        return self.index.allowed_on_some(principal, host_of(peer), op, rt)

    # ---------------------------------------------------------------- storage
    def load(self) -> None:
        """Read the ACLs saved by an earlier run (blocking: call at start-up)."""
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            acls = [AclBinding.from_json(entry) for entry in data["acls"]]
        except (ValueError, KeyError, TypeError) as exc:
            # Starting without the ACLs would open or close everything: refuse, as Kafka
            # refuses to start on unreadable metadata.
            raise RuntimeError(f"cannot read the ACLs in {self.path}: {exc!r}") from exc
        for acl in acls:
            self.index.add(acl)
        emit("acls_loaded", path=str(self.path), count=len(self.index))

    def _snapshot(self) -> str:
        acls = [acl.to_json() for acl in sorted(self.index, key=sort_key)]
        return json.dumps({"version": 1, "acls": acls}, indent=1) + "\n"

    async def save(self) -> None:
        """Write the current ACLs durably, off the event loop (:class:`DurableFile`)."""
        await self._file.save(self._snapshot)

    def add(self, acls: Iterable[AclBinding], principal: str) -> None:
        added = [acl for acl in acls if self.index.add(acl)]
        for acl in added:
            emit("acl_changed", action="created", principal=principal,
                 **_acl_fields(acl))

    def remove(self, acls: Iterable[AclBinding], principal: str) -> None:
        for acl in acls:
            if self.index.remove(acl):
                emit("acl_changed", action="deleted", principal=principal,
                     **_acl_fields(acl))


def _acl_fields(acl: AclBinding) -> dict[str, str]:
    return {"resource_type": acl.resource_type.name, "resource_name": acl.name,
            "pattern_type": acl.pattern_type.name, "acl_principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _rule(decision: Decision) -> str:
    """The ACL that decided, as Kafka's audit line names it (``MatchingAcl``); "" when none
    did (a super user, no ACL at all, no matching ALLOW)."""
    return decision.acl.text() if decision.acl is not None else ""
