"""The authorizer's decision for one request (``AclIndex.decide``, Kafka's
``StandardAuthorizer.authorize``) and its audit line: which ACL decided and why, the prefixed
ACLs found by their name lengths after others are removed, and decisions remembered only until
the ACLs change. Each test kills mutants that survived ``nox -s mutation``
(docs/development.md)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CapturedLog
from tests.server.test_pin_acl_on_some import ALICE, HOST, Op, P, Perm, R, acl, index
from trio_broker.config import load_config
from trio_broker.server.acl import AclIndex, Decision
from trio_broker.server.authorizer import Authorizer


def decide(idx: AclIndex, name: str = "t", op: Op = Op.WRITE, principal: str = ALICE,
           rt: R = R.TOPIC) -> Decision:
    return idx.decide(principal, HOST, op, rt, name)


def test_a_deny_decides_over_an_allow_and_is_named() -> None:
    deny = acl("t", perm=Perm.DENY)
    allow = acl("t")
    decision = decide(index(allow, deny))
    assert decision == Decision(False, deny, "denied by ACL")


def test_an_allow_is_named_and_the_reasons_say_why() -> None:
    allow = acl("t", pattern=P.PREFIXED)
    assert decide(index(allow), "topic") == Decision(True, allow, "allowed by ACL")
    assert decide(index(allow), "u") == Decision(False, None, "no matching ALLOW ACL")
    assert decide(index(super_users=(ALICE,))) == Decision(True, None, "super user")
    assert decide(index(allow_if_no_acl=True)) == Decision(
        True, None, "no ACL found, allow.everyone.if.no.acl.found")
    # An ACL on the resource for someone else still counts as "ACLs found" (Kafka's rule).
    assert decide(index(acl("t", principal="User:bob"), allow_if_no_acl=True)) == Decision(
        False, None, "no matching ALLOW ACL")


def test_a_prefixed_acl_stays_found_when_another_of_its_length_is_removed() -> None:
    # Prefixed ACLs are looked up by the lengths of their names, counted per length: removing
    # "ab" must leave the length 2 (and "to") in place.
    keep = acl("to", pattern=P.PREFIXED)
    gone = acl("ab", pattern=P.PREFIXED)
    also = acl("xy", pattern=P.PREFIXED)
    idx = index(keep, gone, also)
    assert idx.remove(gone) and idx.remove(also)
    assert decide(idx, "topic").allowed
    assert idx.remove(keep)
    assert not decide(idx, "topic").allowed


def test_a_remembered_decision_is_forgotten_when_the_acls_change() -> None:
    idx = index(acl("t"))
    first = decide(idx)
    assert first.allowed and decide(idx) is first  # the same question, answered from memory
    idx.add(acl("t", perm=Perm.DENY))
    assert not decide(idx).allowed
    idx.remove(acl("t", perm=Perm.DENY))
    assert decide(idx).allowed


def test_the_audit_line_names_the_acl_that_decided(tmp_path: Path,
                                                   log_events: CapturedLog) -> None:
    config = load_config({"log.dirs": str(tmp_path),
                          "authorizer.class.name": "standard",
                          "logging.level": "DEBUG"})
    authorizer = Authorizer(tmp_path, config)
    deny = acl("secret", perm=Perm.DENY, op=Op.READ)
    authorizer.index.add(deny)
    authorizer.index.add(acl("open", op=Op.READ))
    peer = f"{HOST}:9000"
    assert not authorizer.authorize(ALICE, peer, Op.READ, R.TOPIC, "secret")
    assert authorizer.authorize(ALICE, peer, Op.READ, R.TOPIC, "open")
    assert not authorizer.authorize(ALICE, peer, Op.READ, R.TOPIC, "other")
    denied = log_events.events("authorization_denied")
    assert [(e["resource_name"], e["reason"], e["acl"]) for e in denied] == [
        ("secret", "denied by ACL",
         "(pattern=ResourcePattern(resourceType=TOPIC, name=secret, patternType=LITERAL), "
         "entry=(principal=User:alice, host=*, operation=READ, permissionType=DENY))"),
        ("other", "no matching ALLOW ACL", ""),
    ]
    (allowed,) = log_events.events("authorization_allowed")
    assert allowed["acl"].startswith(
        "(pattern=ResourcePattern(resourceType=TOPIC, name=open, patternType=LITERAL), ")
    assert allowed["host"] == HOST
