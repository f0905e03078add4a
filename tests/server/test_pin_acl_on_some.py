"""KIP-679's ``authorizeByResourceType`` (``AclIndex.allowed_on_some``), the rule behind an
idempotent producer without IDEMPOTENT_WRITE on the cluster: may the principal WRITE at least
one topic? Each test kills mutants that survived ``nox -s mutation`` (docs/development.md)."""

from __future__ import annotations

from trio_broker.server.acl import (
    AclBinding,
    AclIndex,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)

Op, R, P, Perm = AclOperation, ResourceType, PatternType, PermissionType
HOST = "10.0.0.1"
ALICE = "User:alice"


def acl(name: str, *, op: AclOperation = Op.WRITE, perm: PermissionType = Perm.ALLOW,
        rt: ResourceType = R.TOPIC, pattern: PatternType = P.LITERAL, host: str = "*",
        principal: str = ALICE) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def index(*acls: AclBinding, super_users: tuple[str, ...] = (),
          allow_if_no_acl: bool = False) -> AclIndex:
    idx = AclIndex(super_users=super_users, allow_if_no_acl=allow_if_no_acl)
    for binding in acls:
        idx.add(binding)
    return idx


def on_some(idx: AclIndex, op: AclOperation = Op.WRITE, rt: ResourceType = R.TOPIC,
            principal: str = ALICE, host: str = HOST) -> bool:
    return idx.allowed_on_some(principal, host, op, rt)


def test_a_super_user_may_write_some_topic_even_under_a_deny_everything() -> None:
    idx = index(acl("*", perm=Perm.DENY), super_users=(ALICE,))
    assert on_some(idx)
    assert not on_some(idx, principal="User:bob")


def test_a_literal_deny_covers_the_literal_allow_of_its_own_name_only() -> None:
    assert not on_some(index(acl("t"), acl("t", perm=Perm.DENY)))
    # A literal DENY of another topic leaves the ALLOW on "t" usable.
    assert on_some(index(acl("t"), acl("u", perm=Perm.DENY)))
    # A literal DENY does not cover a PREFIXED allow of the same name ("t" allows "t2" too).
    assert on_some(index(acl("t", pattern=P.PREFIXED), acl("t", perm=Perm.DENY)))
    # A PREFIXED deny covers the literal allows that start with it, not the others.
    assert not on_some(index(acl("t1"), acl("t", perm=Perm.DENY, pattern=P.PREFIXED)))
    assert on_some(index(acl("u1"), acl("t", perm=Perm.DENY, pattern=P.PREFIXED)))


def test_the_acls_of_other_resource_types_are_skipped_not_the_end_of_the_search() -> None:
    """A GROUP ACL next to a TOPIC ACL: each type's question finds its own ACL whatever the
    order the index keeps them in."""
    idx = index(acl("g", op=Op.READ, rt=R.GROUP), acl("t"))
    assert on_some(idx, Op.WRITE, R.TOPIC)
    assert on_some(idx, Op.READ, R.GROUP)
    assert not on_some(idx, Op.WRITE, R.TRANSACTIONAL_ID)


def test_the_host_of_an_acl_is_matched_against_the_client_host() -> None:
    only_here = index(acl("t", host=HOST))
    assert on_some(only_here)
    assert not on_some(only_here, host="10.0.0.2")
    denied_here = index(acl("t"), acl("t", perm=Perm.DENY, host=HOST))
    assert not on_some(denied_here)
    assert on_some(denied_here, host="10.0.0.2")


def test_authorized_operations_match_the_host_of_the_acls() -> None:
    """DescribeTopics' ``topic_authorized_operations``: an ACL for the client's own host
    counts, one for another host does not."""
    idx = index(acl("t", op=Op.READ, host=HOST))
    read_bits = idx.authorized_operations(ALICE, HOST, R.TOPIC, "t")
    assert read_bits & (1 << int(Op.READ))
    assert idx.authorized_operations(ALICE, "10.0.0.2", R.TOPIC, "t") == 0
