"""The sans-IO ACL matcher (trio_broker.server.acl): Kafka's StandardAuthorizer rules."""

from __future__ import annotations

import random
import time

import pytest

from trio_broker.server.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclIndex,
    AclOperation,
    AclProblem,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bits,
    parse_super_users,
    validate_new_acl,
)

Op, R, P, Perm = AclOperation, ResourceType, PatternType, PermissionType
HOST = "10.0.0.1"


def acl(name: str = "orders", principal: str = "User:alice", op: AclOperation = Op.READ,
        perm: PermissionType = Perm.ALLOW, rt: ResourceType = R.TOPIC,
        pattern: PatternType = P.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def index(*acls: AclBinding, **kw: object) -> AclIndex:
    idx = AclIndex(**kw)  # type: ignore[arg-type]
    for a in acls:
        idx.add(a)
    return idx


def allowed(idx: AclIndex, op: AclOperation, name: str = "orders", principal: str = "User:alice",
            rt: ResourceType = R.TOPIC, host: str = HOST) -> bool:
    return idx.decide(principal, host, op, rt, name).allowed


def test_no_acl_denies_by_default_and_allow_everyone_allows() -> None:
    assert not allowed(index(), Op.READ)
    assert allowed(index(allow_if_no_acl=True), Op.READ)


def test_allow_everyone_applies_only_to_resources_without_any_acl() -> None:
    # An ACL of another principal on the topic: the topic has ACLs, so no fallback.
    idx = index(acl(principal="User:bob"), allow_if_no_acl=True)
    assert not allowed(idx, Op.READ)
    assert allowed(idx, Op.READ, name="other")
    # A prefixed ACL covering the topic counts as an ACL on it too.
    idx = index(acl("ord", principal="User:bob", pattern=P.PREFIXED), allow_if_no_acl=True)
    assert not allowed(idx, Op.READ)


def test_super_user_does_everything() -> None:
    idx = index(acl(op=Op.ALL, perm=Perm.DENY, principal="User:*"),
                super_users=parse_super_users("User:admin; User:ops"))
    for op in (Op.READ, Op.WRITE, Op.ALTER, Op.CLUSTER_ACTION):
        assert allowed(idx, op, principal="User:admin")
        assert allowed(idx, op, principal="User:ops")
    assert not allowed(idx, Op.READ)


def test_literal_match_is_exact() -> None:
    idx = index(acl("orders"))
    assert allowed(idx, Op.READ, "orders")
    assert not allowed(idx, Op.READ, "orders2")
    assert not allowed(idx, Op.READ, "order")
    assert not allowed(idx, Op.WRITE, "orders")
    assert not allowed(idx, Op.READ, "orders", principal="User:bob")
    assert not allowed(idx, Op.READ, "orders", rt=R.GROUP)


def test_wildcard_resource_principal_and_host() -> None:
    idx = index(acl("*", principal="User:*"))
    assert allowed(idx, Op.READ, "anything", principal="User:zed")
    idx = index(acl("orders", host="10.0.0.1"))
    assert allowed(idx, Op.READ, host="10.0.0.1")
    assert not allowed(idx, Op.READ, host="10.0.0.2")


def test_prefixed_match() -> None:
    idx = index(acl("fin-", pattern=P.PREFIXED))
    assert allowed(idx, Op.READ, "fin-orders")
    assert allowed(idx, Op.READ, "fin-")
    assert not allowed(idx, Op.READ, "fin")
    assert not allowed(idx, Op.READ, "xfin-orders")
    # '*' as a prefix is a literal character, not a wildcard
    idx = index(acl("*", pattern=P.PREFIXED))
    assert not allowed(idx, Op.READ, "orders")
    assert allowed(idx, Op.READ, "*x")


def test_deny_beats_allow_wherever_it_comes_from() -> None:
    base = acl("fin-", op=Op.ALL, pattern=P.PREFIXED)
    assert allowed(index(base), Op.WRITE, "fin-orders")
    for deny in (acl("fin-orders", op=Op.WRITE, perm=Perm.DENY),
                 acl("*", op=Op.WRITE, perm=Perm.DENY, principal="User:*"),
                 acl("fin-o", op=Op.WRITE, perm=Perm.DENY, pattern=P.PREFIXED),
                 acl("fin-orders", op=Op.ALL, perm=Perm.DENY, host=HOST)):
        idx = index(base, deny)
        assert not allowed(idx, Op.WRITE, "fin-orders"), deny
        decision = idx.decide("User:alice", HOST, Op.WRITE, R.TOPIC, "fin-orders")
        assert decision.acl == deny


def test_deny_by_host_only_for_that_host() -> None:
    idx = index(acl(op=Op.ALL), acl(op=Op.ALL, perm=Perm.DENY, host="10.0.0.9"))
    assert allowed(idx, Op.READ, host="10.0.0.1")
    assert not allowed(idx, Op.READ, host="10.0.0.9")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_operations_that_imply_describe(granted: AclOperation) -> None:
    assert allowed(index(acl(op=granted)), Op.DESCRIBE)


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE])
def test_operations_that_do_not_imply_describe(granted: AclOperation) -> None:
    assert not allowed(index(acl(op=granted)), Op.DESCRIBE)


def test_alter_configs_implies_describe_configs_only() -> None:
    idx = index(acl(op=Op.ALTER_CONFIGS))
    assert allowed(idx, Op.DESCRIBE_CONFIGS)
    assert not allowed(idx, Op.ALTER)
    assert not allowed(index(acl(op=Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS)


def test_describe_does_not_imply_read() -> None:
    assert not allowed(index(acl(op=Op.DESCRIBE)), Op.READ)


def test_deny_is_not_implied() -> None:
    # DENY READ does not deny DESCRIBE (which an ALLOW WRITE grants).
    idx = index(acl(op=Op.WRITE), acl(op=Op.READ, perm=Perm.DENY))
    assert allowed(idx, Op.DESCRIBE)
    assert not allowed(idx, Op.READ)


def test_all_allows_and_denies_every_operation() -> None:
    idx = index(acl(op=Op.ALL))
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
               Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert allowed(idx, op)
    idx.add(acl(op=Op.ALL, perm=Perm.DENY))
    assert not allowed(idx, Op.DESCRIBE)


def test_authorized_operations_bits() -> None:
    idx = index(acl(op=Op.WRITE))
    assert idx.authorized_operations("User:alice", HOST, R.TOPIC, "orders") == \
        operations_bits([Op.WRITE, Op.DESCRIBE])
    assert idx.authorized_operations("User:bob", HOST, R.TOPIC, "orders") == 0
    idx = index(acl(CLUSTER_NAME, op=Op.ALL, rt=R.CLUSTER))
    bits = idx.authorized_operations("User:alice", HOST, R.CLUSTER, CLUSTER_NAME)
    assert bits == operations_bits([Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                    Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE])


def test_allowed_on_some_topic() -> None:
    principal = "User:alice"
    assert not index().allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    assert index(allow_if_no_acl=True).allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    assert index(acl("t", op=Op.WRITE)).allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    assert not index(acl("t", op=Op.READ)).allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    denied_all = index(acl("t", op=Op.WRITE), acl("*", op=Op.WRITE, perm=Perm.DENY))
    assert not denied_all.allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    covered = index(acl("ab", op=Op.WRITE, pattern=P.PREFIXED),
                    acl("a", op=Op.WRITE, perm=Perm.DENY, pattern=P.PREFIXED))
    assert not covered.allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)
    covered.add(acl("b", op=Op.WRITE))
    assert covered.allowed_on_some(principal, HOST, Op.WRITE, R.TOPIC)


def test_add_is_idempotent_and_remove_cleans_the_index() -> None:
    idx = AclIndex()
    a = acl("fin-", pattern=P.PREFIXED)
    assert idx.add(a)
    assert not idx.add(a)
    assert len(idx) == 1
    assert idx.remove(a)
    assert not idx.remove(a)
    assert len(idx) == 0
    assert not allowed(idx, Op.READ, "fin-x")
    assert idx._prefix_lengths[R.TOPIC] == {}


# --------------------------------------------------------------------------- filters
def flt(rt: ResourceType = R.ANY, name: str | None = None, pattern: PatternType = P.ANY,
        principal: str | None = None, host: str | None = None, op: AclOperation = Op.ANY,
        perm: PermissionType = Perm.ANY) -> AclFilter:
    return AclFilter(rt, name, pattern, principal, host, op, perm)


def test_filters() -> None:
    lit = acl("orders")
    star = acl("*")
    pre = acl("ord", pattern=P.PREFIXED)
    group = acl("orders", rt=R.GROUP)
    idx = index(lit, star, pre, group)
    assert set(idx.matching(flt())) == {lit, star, pre, group}
    assert set(idx.matching(flt(R.TOPIC))) == {lit, star, pre}
    # ANY: the exact name, any pattern type
    assert set(idx.matching(flt(R.TOPIC, "orders"))) == {lit}
    # MATCH: every pattern that applies to the name
    assert set(idx.matching(flt(R.TOPIC, "orders", P.MATCH))) == {lit, star, pre}
    assert set(idx.matching(flt(R.TOPIC, "other", P.MATCH))) == {star}
    assert set(idx.matching(flt(R.TOPIC, "ord", P.PREFIXED))) == {pre}
    assert set(idx.matching(flt(R.TOPIC, pattern=P.LITERAL))) == {lit, star}
    assert idx.matching(flt(principal="User:bob")) == []
    assert idx.matching(flt(host="1.2.3.4")) == []
    assert idx.matching(flt(op=Op.WRITE)) == []
    assert set(idx.matching(flt(op=Op.READ, perm=Perm.ALLOW))) == {lit, star, pre, group}
    assert idx.matching(flt(perm=Perm.DENY)) == []


def test_filters_with_unknown_elements_are_refused() -> None:
    with pytest.raises(AclProblem, match="Unknown patternFilter"):
        flt(pattern=P.UNKNOWN).validate()
    with pytest.raises(AclProblem, match="Unknown entryFilter"):
        flt(op=Op.UNKNOWN).validate()
    flt().validate()


@pytest.mark.parametrize(("binding", "message"), [
    (acl(rt=R.ANY), "Invalid resourceType ANY"),
    (acl(rt=R.DELEGATION_TOKEN), "not supported"),
    (acl(pattern=P.MATCH), "Invalid patternType MATCH"),
    (acl(op=Op.ANY), "Invalid operation ANY"),
    (acl(perm=Perm.ANY), "Invalid permissionType ANY"),
    (acl("other", rt=R.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(""), "Invalid empty resource name"),
    (acl(principal="alice"), "no colon is present"),
])
def test_invalid_new_acls(binding: AclBinding, message: str) -> None:
    with pytest.raises(AclProblem, match=message):
        validate_new_acl(binding)


def test_valid_new_acl() -> None:
    validate_new_acl(acl(CLUSTER_NAME, rt=R.CLUSTER, op=Op.ALTER))
    validate_new_acl(acl("tx", rt=R.TRANSACTIONAL_ID, op=Op.WRITE, pattern=P.PREFIXED))


def test_json_round_trip() -> None:
    a = acl("fin-", pattern=P.PREFIXED, op=Op.ALTER_CONFIGS, perm=Perm.DENY, host="::1")
    assert AclBinding.from_json(a.to_json()) == a  # type: ignore[arg-type]


# ------------------------------------------------------------------ many principals
def test_many_principals_against_a_brute_force_reference() -> None:
    """Random ACLs over many principals, hosts and names: the index agrees with a direct
    reading of Kafka's rules applied to every ACL."""
    rng = random.Random(13)
    principals = [f"User:u{i}" for i in range(60)] + ["User:*"]
    hosts = ["*", "10.0.0.1", "10.0.0.2"]
    names = ["a", "ab", "abc", "b", "*", "abd", "x"]
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
    acls = {acl(rng.choice(names), rng.choice(principals), rng.choice(ops),
                rng.choice([Perm.ALLOW, Perm.ALLOW, Perm.DENY]),
                pattern=rng.choice([P.LITERAL, P.PREFIXED]), host=rng.choice(hosts))
            for _ in range(400)}
    idx = index(*acls, super_users={"User:u0"}, allow_if_no_acl=True)

    def reference(principal: str, host: str, op: AclOperation, name: str) -> bool:
        if principal == "User:u0":
            return True
        on_resource = [a for a in acls if (a.pattern_type is P.LITERAL and a.name in (name, "*"))
                       or (a.pattern_type is P.PREFIXED and name.startswith(a.name))]
        if not on_resource:
            return True
        relevant = [a for a in on_resource if a.principal in (principal, "User:*")
                    and a.host in ("*", host)]
        if any(a.permission is Perm.DENY and a.operation in (op, Op.ALL) for a in relevant):
            return False
        implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
                   Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(op, set())
        return any(a.permission is Perm.ALLOW and a.operation in ({op, Op.ALL} | implied)
                   for a in relevant)

    checked = 0
    for principal in principals[:-1] + ["User:nobody"]:
        for host in ("10.0.0.1", "10.0.0.2"):
            for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
                for name in ("a", "ab", "abc", "abcd", "b", "x", "y", "*"):
                    got = idx.decide(principal, host, op, R.TOPIC, name).allowed
                    assert got == reference(principal, host, op, name), (principal, host, op,
                                                                         name)
                    checked += 1
    assert checked == 61 * 2 * 5 * 8


def test_lookup_cost_does_not_grow_with_acls_on_other_resources() -> None:
    """100k ACLs on other topics and prefixes: a decision still takes microseconds."""
    idx = AclIndex()
    for i in range(50_000):
        idx.add(acl(f"topic-{i}", f"User:u{i % 500}", Op.WRITE))
        idx.add(acl(f"pre{i % 40}-{i}", f"User:u{i % 500}", Op.READ, pattern=P.PREFIXED))
    idx.add(acl("orders", "User:alice", Op.WRITE))
    started = time.perf_counter()
    for _ in range(10_000):
        # uncached: the index lookup itself
        assert idx._decide("User:alice", HOST, Op.WRITE, R.TOPIC, "orders").allowed
    per_decision = (time.perf_counter() - started) / 10_000
    assert per_decision < 100e-6, per_decision


def test_decision_cache_is_invalidated_by_changes() -> None:
    idx = index(acl(op=Op.WRITE))
    assert allowed(idx, Op.WRITE)
    deny = acl(op=Op.WRITE, perm=Perm.DENY)
    idx.add(deny)
    assert not allowed(idx, Op.WRITE)
    idx.remove(deny)
    assert allowed(idx, Op.WRITE)
    for i in range(70_000):  # past CACHE_SIZE: the cache is cleared, answers stay right
        assert not allowed(idx, Op.WRITE, name=f"n{i}")
    assert allowed(idx, Op.WRITE)
