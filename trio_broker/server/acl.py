"""ACLs and their matching, as Kafka's StandardAuthorizer decides (sans-IO: no Trio, no files).

The vocabulary is Kafka's ``org.apache.kafka.common.acl`` / ``resource`` enums with their wire
codes. :class:`AclIndex` holds the bindings indexed by resource type and name: a decision looks
up the literal name, the literal wildcard ``*`` and every prefixed pattern that is a prefix of
the name (one dict probe per distinct prefix length in use), so its cost does not grow with the
number of ACLs on other resources.

Decision rules (``StandardAuthorizerData.authorize``):

* a super user is allowed everything;
* an ACL applies when its principal is the request's or ``User:*`` and its host is the
  request's or ``*``;
* a DENY for the operation (or ``ALL``) wins over any ALLOW; DENY implies nothing else;
* an ALLOW of ``ALL`` allows everything; READ, WRITE, DELETE and ALTER imply DESCRIBE;
  ALTER_CONFIGS implies DESCRIBE_CONFIGS;
* with no matching ALLOW the answer is no, unless the resource has no ACL at all and
  ``allow.everyone.if.no.acl.found`` is set.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator

import attrs


class ResourceType(enum.IntEnum):
    """``org.apache.kafka.common.resource.ResourceType``."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """``org.apache.kafka.common.resource.PatternType``; ANY and MATCH are filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """``org.apache.kafka.common.acl.AclOperation``."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    """``org.apache.kafka.common.acl.AclPermissionType``."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The one name of the cluster resource (``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: The wildcard resource name, principal name and host.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

_O = AclOperation
#: ALLOW ACLs of these operations also allow DESCRIBE / DESCRIBE_CONFIGS.
IMPLIES_DESCRIBE = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})

#: Operations each resource type supports (``AclEntry.supportedOperations``): what the
#: authorized-operations bit fields are computed over.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def operations_bits(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField`` of operation codes (an authorized-operations field)."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


@attrs.frozen
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def to_json(self) -> dict[str, object]:
        """The stored form (names, not codes, so the file reads like kafka-acls.sh output)."""
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern_type": self.pattern_type.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> AclBinding:
        return cls(ResourceType[data["resource_type"]], data["name"],
                   PatternType[data["pattern_type"]], data["principal"], data["host"],
                   AclOperation[data["operation"]], PermissionType[data["permission"]])

    def text(self) -> str:
        """Kafka's ``AclBinding.toString``: ``(pattern=ResourcePattern(...), entry=(...))``."""
        return (f"(pattern={pattern_text(self.resource_type, self.name, self.pattern_type)}, "
                f"entry={entry_text(self.principal, self.host, self.operation, self.permission)})")


def pattern_text(rt: ResourceType, name: str | None, pattern: PatternType) -> str:
    """``ResourcePattern.toString`` (and ``ResourcePatternFilter``'s: ``<any>`` for null)."""
    return (f"ResourcePattern(resourceType={rt.name}, name={'<any>' if name is None else name}, "
            f"patternType={pattern.name})")


def entry_text(principal: str, host: str, op: AclOperation, perm: PermissionType) -> str:
    """``AccessControlEntry.toString``."""
    return (f"(principal={principal}, host={host}, operation={op.name}, "
            f"permissionType={perm.name})")


class AclProblem(ValueError):
    """An ACL or filter Kafka refuses with INVALID_REQUEST; the message is Kafka's."""


def validate_new_acl(binding: AclBinding) -> None:
    """Kafka's checks of a CreateAcls entry (``AclApis`` and ``AclControlManager.validateNewAcl``).

    Delegation-token and user resources are refused: this broker has no delegation tokens.
    """
    rt = binding.resource_type
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclProblem(f"Invalid resourceType {rt.name}")
    if rt in (ResourceType.DELEGATION_TOKEN, ResourceType.USER):
        raise AclProblem(f"ACLs on {rt.name} resources are not supported: this broker has no "
                         "delegation tokens")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclProblem(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclProblem(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        raise AclProblem(f"Invalid permissionType {binding.permission.name}")
    if rt is ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        raise AclProblem(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.name:
        raise AclProblem("Invalid empty resource name")
    if ":" not in binding.principal:
        raise AclProblem(f"Could not parse principal from `{binding.principal}` (no colon is "
                         "present separating the principal type from the principal name)")


@attrs.frozen
class AclFilter:
    """An ``AclBindingFilter``: None matches any name, principal or host."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def validate(self) -> None:
        """``AclControlManager.validateFilter``: no UNKNOWN element."""
        if PatternType.UNKNOWN is self.pattern_type or ResourceType.UNKNOWN is self.resource_type:
            raise AclProblem("Unknown patternFilter.")
        if AclOperation.UNKNOWN is self.operation or PermissionType.UNKNOWN is self.permission:
            raise AclProblem("Unknown entryFilter.")

    def matches(self, acl: AclBinding) -> bool:
        """``ResourcePatternFilter.matches`` and ``AccessControlEntryFilter.matches``."""
        if self.resource_type is not ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        if self.name is not None:
            if pt is PatternType.ANY or pt == acl.pattern_type:
                if self.name != acl.name:
                    return False
            elif acl.pattern_type is PatternType.LITERAL:  # MATCH
                if self.name != acl.name and acl.name != WILDCARD:
                    return False
            elif not self.name.startswith(acl.name):  # MATCH against a prefix
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission is PermissionType.ANY or self.permission == acl.permission


#: A decision: allowed or not, and the ACL that decided (None: a super user, or no ACL).
@attrs.frozen
class Decision:
    allowed: bool
    acl: AclBinding | None = None
    reason: str = ""


def _applies(acl: AclBinding, principals: tuple[str, str], host: str,
             op: AclOperation) -> bool:
    """Whether ``acl`` speaks about this request (``StandardAuthorizerData.findResult``)."""
    if acl.principal not in principals:
        return False
    if acl.host != WILDCARD and acl.host != host:
        return False
    acl_op = acl.operation
    if acl_op is AclOperation.ALL or acl_op == op:
        return True
    if acl.permission is PermissionType.ALLOW:
        if op is AclOperation.DESCRIBE:
            return acl_op in IMPLIES_DESCRIBE
        if op is AclOperation.DESCRIBE_CONFIGS:
            return acl_op in IMPLIES_DESCRIBE_CONFIGS
    return False


#: Most decisions remembered by an :class:`AclIndex` between changes.
CACHE_SIZE = 65536


class AclIndex:
    """The ACLs of the broker, indexed for decisions and filters."""

    def __init__(self, *, super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._all: set[AclBinding] = set()
        #: ``{(resource type, literal name): acls}`` (``*`` is a name like any other here).
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        #: ``{(resource type, prefix): acls}`` and, per type, the prefix lengths in use.
        self._prefixed: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        #: Decisions already made, until the next change (a producer asks the same question on
        #: every request); bounded by clearing it when it grows past CACHE_SIZE.
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], Decision] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._all)

    def __contains__(self, acl: object) -> bool:
        return acl in self._all

    # ---------------------------------------------------------------- changes
    def add(self, acl: AclBinding) -> bool:
        """Add one binding; False if it was there already (adding is idempotent, as Kafka)."""
        if acl in self._all:
            return False
        self._cache.clear()
        self._all.add(acl)
        key = (acl.resource_type, acl.name)
        if acl.pattern_type is PatternType.PREFIXED:
            self._prefixed.setdefault(key, set()).add(acl)
            lengths = self._prefix_lengths.setdefault(acl.resource_type, {})
            lengths[len(acl.name)] = lengths.get(len(acl.name), 0) + 1
        else:
            self._literal.setdefault(key, set()).add(acl)
        return True

    def remove(self, acl: AclBinding) -> bool:
        if acl not in self._all:
            return False
        self._cache.clear()
        self._all.discard(acl)
        key = (acl.resource_type, acl.name)
        table = self._prefixed if acl.pattern_type is PatternType.PREFIXED else self._literal
        bucket = table[key]
        bucket.discard(acl)
        if not bucket:
            del table[key]
        if acl.pattern_type is PatternType.PREFIXED:
            lengths = self._prefix_lengths[acl.resource_type]
            lengths[len(acl.name)] -= 1
            if not lengths[len(acl.name)]:
                del lengths[len(acl.name)]
        return True

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        """The bindings a filter matches (DescribeAcls, DeleteAcls), in a stable order."""
        return sorted((acl for acl in self._all if flt.matches(acl)), key=sort_key)

    # ---------------------------------------------------------------- decisions
    def _candidates(self, rt: ResourceType, name: str) -> Iterator[set[AclBinding]]:
        literal = self._literal
        bucket = literal.get((rt, name))
        if bucket:
            yield bucket
        if name != WILDCARD:
            bucket = literal.get((rt, WILDCARD))
            if bucket:
                yield bucket
        lengths = self._prefix_lengths.get(rt)
        if lengths:
            prefixed = self._prefixed
            size = len(name)
            for length in lengths:
                if length <= size:
                    bucket = prefixed.get((rt, name[:length]))
                    if bucket:
                        yield bucket

    def decide(self, principal: str, host: str, op: AclOperation, rt: ResourceType,
               name: str) -> Decision:
        """Whether ``principal`` connecting from ``host`` may do ``op`` on the resource."""
        key = (principal, host, op, rt, name)
        decision = self._cache.get(key)
        if decision is None:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            decision = self._cache[key] = self._decide(principal, host, op, rt, name)
        return decision

    def _decide(self, principal: str, host: str, op: AclOperation, rt: ResourceType,
                name: str) -> Decision:
        if principal in self.super_users:
            return Decision(True, None, "super user")
        principals = (principal, WILDCARD_PRINCIPAL)
        allow: AclBinding | None = None
        found_acls = False
        for bucket in self._candidates(rt, name):
            found_acls = True
            for acl in bucket:
                if _applies(acl, principals, host, op):
                    if acl.permission is PermissionType.DENY:
                        return Decision(False, acl, "denied by ACL")
                    allow = acl
        if allow is not None:
            return Decision(True, allow, "allowed by ACL")
        if not found_acls and self.allow_if_no_acl:
            return Decision(True, None, "no ACL found, allow.everyone.if.no.acl.found")
        return Decision(False, None, "no matching ALLOW ACL")

    def authorized_operations(self, principal: str, host: str, rt: ResourceType,
                              name: str) -> int:
        """The bit field of the operations the principal may do on the resource."""
        return operations_bits(op for op in SUPPORTED_OPERATIONS.get(rt, ())
                               if self.decide(principal, host, op, rt, name).allowed)

    def allowed_on_some(self, principal: str, host: str, op: AclOperation,
                        rt: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType`` (KIP-679): may the principal do ``op`` on at
        least one resource of the type? Yes for a super user; else when some ALLOW ACL for it
        is not covered by a DENY (a literal ``*`` DENY covers everything, a prefixed DENY
        covers the patterns that start with it, a literal DENY its own name). With no ACL of
        the type at all, ``allow.everyone.if.no.acl.found`` decides."""
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        allows: list[AclBinding] = []
        denies: list[AclBinding] = []
        any_of_type = False
        for acl in self._all:
            if acl.resource_type != rt:
                continue
            any_of_type = True
            if _applies(acl, principals, host, op):
                (denies if acl.permission is PermissionType.DENY else allows).append(acl)
        if not any_of_type:
            return self.allow_if_no_acl
        if any(d.pattern_type is PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False

        def covered(allow: AclBinding) -> bool:
            for deny in denies:
                if deny.pattern_type is PatternType.PREFIXED and allow.name.startswith(deny.name):
                    return True
                if (deny.pattern_type is PatternType.LITERAL
                        and allow.pattern_type is PatternType.LITERAL
                        and deny.name == allow.name):
                    return True
            return False

        return any(not covered(allow) for allow in allows)


def sort_key(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (int(acl.resource_type), acl.name, int(acl.pattern_type), acl.principal, acl.host,
            int(acl.operation), int(acl.permission))


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:alice;User:bob``)."""
    if not text:
        return frozenset()
    return frozenset(item.strip() for item in text.split(";") if item.strip())
