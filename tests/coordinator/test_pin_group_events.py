"""The classic group's log events, field by field. The operators' report reads them
(``analytics.tables.groups``: rebalances, joins, members left and expired per ``group_id``, the
highest ``generation``, the rebalance ``reason`` list and ``duration_ms``) and operators search
them by member, instance and client; docs/logging.md declares each field. The mutation run over
``coordinator/classic_*`` found no test reading these fields (docs/development.md, "Sixth run").
"""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode as E

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_state import (
    Effects,
    join_key,
    member_key,
    pending_key,
    sync_key,
)
from trio_broker.coordinator.group import GroupState
from trio_broker.observability.events import EVENTS

GROUP_EVENTS = ("group_join", "group_sync", "rebalance_started", "rebalance_completed",
                "member_left", "member_expired", "static_member_replaced",
                "group_state_changed")


def logged(d: Driver, *names: str) -> list[tuple[str, dict[str, Any]]]:
    """The events named (all group events if none), with their fields, and forget them. Each
    event's fields are ones its schema declares (docs/logging.md)."""
    wanted = names or GROUP_EVENTS
    out = [(e.name, dict(e.fields)) for e in d.logged if e.name in wanted]
    for name, fields in out:
        assert set(fields) <= set(EVENTS[name].fields), (name, set(fields))
    d.logged.clear()
    return out


def state(old: str, new: str, generation: int) -> tuple[str, dict[str, Any]]:
    return ("group_state_changed", {"group_id": "g", "old_state": old, "new_state": new,
                                    "generation": generation})


def test_a_first_rebalance_logs_the_join_the_states_the_sync_and_its_duration() -> None:
    d = Driver(initial_rebalance_delay_ms=3000)
    member = d.join(client_id="c1", client_host="/10.0.0.1").reply.member_id  # type: ignore[union-attr]
    d.logged.clear()
    d.join(member, client_id="c1", client_host="/10.0.0.1", reason="starting up",
           protocols=[("range", b"m"), ("roundrobin", b"r")], session_timeout_ms=10_000,
           rebalance_timeout_ms=30_000)
    assert logged(d) == [
        ("group_join", {"group_id": "g", "member_id": member, "group_instance_id": "",
                        "client_id": "c1", "client_host": "/10.0.0.1",
                        "protocol_type": "consumer", "protocols": "range,roundrobin",
                        "session_timeout_ms": 10_000, "rebalance_timeout_ms": 30_000,
                        "generation": 0, "state": "Empty", "reason": "starting up"}),
        state("Empty", "PreparingRebalance", 0),
        ("rebalance_started", {"group_id": "g",
                               "reason": f"adding new member {member} (starting up)",
                               "generation": 0, "members": 1, "previous_state": "Empty"})]
    d.now += 3000
    d.fire(join_key("g"))
    assert logged(d) == [state("PreparingRebalance", "CompletingRebalance", 1)]
    d.now += 500
    d.monotonic_extra = 0.0001234  # a fraction of a millisecond more
    d.sync(member, 1, {member: b"a"})
    d.flush()
    assert logged(d) == [
        ("group_sync", {"group_id": "g", "member_id": member, "generation": 1,
                        "is_leader": True, "state": "CompletingRebalance"}),
        state("CompletingRebalance", "Stable", 1),
        ("rebalance_completed", {"group_id": "g", "generation": 1, "protocol": "range",
                                 "leader": member, "members": 1, "state": "Stable",
                                 "duration_ms": 3500.123})]


def test_a_rebalance_that_empties_the_group_completes_with_no_protocol_or_leader() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.logged.clear()
    d.now += 20
    d.take(d.core.leave_group("g", [(member, None, None)]))
    assert logged(d) == [
        ("member_left", {"group_id": "g", "member_id": member, "group_instance_id": "",
                         "reason": ""}),
        state("Stable", "PreparingRebalance", 1),
        ("rebalance_started", {"group_id": "g", "reason": f"member {member} left",
                               "generation": 1, "members": 0, "previous_state": "Stable"}),
        state("PreparingRebalance", "Empty", 2),
        ("rebalance_completed", {"group_id": "g", "generation": 2, "protocol": "",
                                 "leader": "", "members": 0, "state": "Empty",
                                 "duration_ms": 0.0})]


def test_leaving_logs_the_reason_and_the_instance() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    static = d.stable_static_group()
    d.logged.clear()
    d.take(d.core.leave_group("g", [("", "i1", "shutting down")]))
    left, _, started = logged(d)[:3]
    assert left == ("member_left", {"group_id": "g", "member_id": static,
                                    "group_instance_id": "i1", "reason": "shutting down"})
    assert started[1]["reason"] == f"member {static} left (shutting down)"
    # A pending member (handed an id, never joined) leaving.
    pending = d.join(client_id="p").reply.member_id  # type: ignore[union-attr]
    d.logged.clear()
    d.take(d.core.leave_group("g", [(pending, None, None)]))
    assert logged(d, "member_left") == [
        ("member_left", {"group_id": "g", "member_id": pending, "group_instance_id": "",
                         "reason": "pending member left"})]


def test_a_metadata_update_logs_its_reason() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.logged.clear()
    d.join(member, protocols=[("range", b"new")], reason="subscription changed")
    assert logged(d, "rebalance_started") == [
        ("rebalance_started", {"group_id": "g",
                               "reason": f"updating metadata of member {member} "
                                         "(subscription changed)",
                               "generation": 1, "members": 1, "previous_state": "Stable"})]
    # Without a reason (JoinGroup before v8), the texts carry none. (The group of one is
    # CompletingRebalance now: its only member rejoined.)
    d.join(member, protocols=[("range", b"newer")])
    [(_, joined), (_, started)] = logged(d, "group_join", "rebalance_started")
    assert (joined["reason"], started["reason"]) == ("", f"updating metadata of member {member}")
    assert logged(d) == []  # logged() forgot what it returned
    newcomer, _ = d.join_new(client_id="n")
    [(_, joined), (_, started)] = logged(d, "group_join", "rebalance_started")
    assert (joined["reason"], started["reason"]) == ("", f"adding new member {newcomer}")


def test_expiries_log_why_the_member_went() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    d.logged.clear()
    d.fire(member_key("g", member))
    expired, _, started = logged(d)[:3]
    assert expired == ("member_expired", {"group_id": "g", "member_id": member,
                                          "group_instance_id": "", "reason": "session_timeout",
                                          "state": "Stable"})
    assert started[1]["reason"] == f"session_timeout of {member}"
    # A pending member whose id was never used.
    pending = d.join(client_id="p").reply.member_id  # type: ignore[union-attr]
    d.logged.clear()
    d.fire(pending_key("g", pending))
    assert logged(d, "member_expired") == [
        ("member_expired", {"group_id": "g", "member_id": pending, "group_instance_id": "",
                            "reason": "pending_member_timeout", "state": "Empty"})]


def test_a_new_member_timing_out_in_a_rebalance_logs_new_member_join_timeout() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old = d.stable_static_group()
    newcomer, _ = d.join_new(client_id="n")
    d.logged.clear()
    d.fire(member_key("g", newcomer))
    assert logged(d, "member_expired") == [
        ("member_expired", {"group_id": "g", "member_id": newcomer, "group_instance_id": "",
                            "reason": "new_member_join_timeout",
                            "state": "PreparingRebalance"})]
    # The static member never rejoined either; at the rebalance timeout only dynamic members
    # that did not rejoin are dropped (with rebalance_timeout): none here.
    d.fire(join_key("g"))
    assert logged(d, "member_expired") == []
    assert old in d.core.groups["g"].members


def test_a_member_not_rejoining_in_time_logs_rebalance_timeout() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member = d.stable_group_of_one()
    newcomer, _ = d.join_new(client_id="n")
    d.logged.clear()
    d.fire(join_key("g"))
    assert logged(d, "member_expired") == [
        ("member_expired", {"group_id": "g", "member_id": member, "group_instance_id": "",
                            "reason": "rebalance_timeout", "state": "PreparingRebalance"})]


def test_members_not_syncing_in_time_log_sync_timeout_and_the_rebalance_names_them() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    first = d.join(group_instance_id="i1")
    two, _ = d.join_new()
    d.finish_join()
    assert first.ticket is not None
    one = d.answers[first.ticket].member_id
    d.logged.clear()
    d.fire(sync_key("g"))
    found = logged(d, "member_expired", "rebalance_started")
    assert found == [
        ("member_expired", {"group_id": "g", "member_id": two, "group_instance_id": "",
                            "reason": "sync_timeout", "state": "CompletingRebalance"}),
        ("member_expired", {"group_id": "g", "member_id": one, "group_instance_id": "i1",
                            "reason": "sync_timeout", "state": "CompletingRebalance"}),
        ("rebalance_started", {"group_id": "g",
                               "reason": "members did not sync within the rebalance "
                                         f"timeout: {two},{one}",
                               "generation": 1, "members": 0,
                               "previous_state": "CompletingRebalance"})]


def test_a_static_member_taking_over_logs_the_replacement() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    old = d.stable_static_group()
    d.logged.clear()
    d.join(group_instance_id="i1")
    new = d.core.groups["g"].static_member_id("i1")
    assert logged(d, "static_member_replaced") == [
        ("static_member_replaced", {"group_id": "g", "group_instance_id": "i1",
                                    "old_member_id": old, "member_id": new,
                                    "rebalance": False})]
    d.flush()
    # Preferring another protocol (which the group then selects) it rebalances, and says why.
    d.join(group_instance_id="i1", protocols=[("roundrobin", b"r"), ("range", b"m")])
    newer = d.core.groups["g"].static_member_id("i1")
    replaced, started = logged(d, "static_member_replaced", "rebalance_started")[::-1]
    assert replaced == ("static_member_replaced", {
        "group_id": "g", "group_instance_id": "i1", "old_member_id": new, "member_id": newer,
        "rebalance": True})
    assert started[1]["reason"] == "static member i1 rejoined with other protocols"


def test_a_static_member_restarting_during_the_sync_logs_why_the_group_rebalances() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    d.join(group_instance_id="i1")
    d.finish_join()
    d.logged.clear()
    d.join(group_instance_id="i1")
    [(_, started)] = logged(d, "rebalance_started")
    assert started["reason"] == "static member i1 rejoined during sync"


def test_a_failed_assignment_store_logs_its_error_as_the_reason() -> None:
    d = Driver(initial_rebalance_delay_ms=0)
    member, _ = d.join_new()
    d.fire(join_key("g"))
    d.sync(member, 1, {member: b"a"})
    d.logged.clear()
    d.flush(E.coordinator_not_available)
    [(_, started)] = logged(d, "rebalance_started")
    assert started["reason"] == f"storing the assignment failed ({E.coordinator_not_available})"


def test_an_illegal_transition_is_refused_naming_both_states() -> None:
    d = Driver()
    d.join()
    with pytest.raises(RuntimeError, match="group g: illegal transition Empty -> Stable"):
        d.core.transition(Effects(), d.core.groups["g"], GroupState.STABLE)
