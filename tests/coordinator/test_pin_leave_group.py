"""LeaveGroup of a pending member in the classic group coordinator's sans-IO core (KIP-394):
a member handed an id (MEMBER_ID_REQUIRED) that leaves before joining with it is forgotten at
once, its pending timer cancelled, and a rebalance waiting for it completes without waiting
for that timer (Kafka's ``removePendingMemberAndUpdateGroup``). The mutation run over
``coordinator/classic_state`` found it unpinned (docs/development.md, ``_leave_one``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.coordinator.test_classic_state import Driver
from trio_broker.coordinator.classic_state import join_key, pending_key
from trio_broker.coordinator.group import GroupState

E = ErrorCode


def test_a_pending_member_that_leaves_is_forgotten_and_the_join_completes_without_it() -> None:
    d = Driver()
    member_id = d.stable_group_of_one()
    group = d.core.groups["g"]
    generation = group.generation_id
    pending = d.join().reply.member_id  # type: ignore[union-attr]
    assert group.pending_members == {pending}
    assert pending_key("g", pending) in d.timers
    rejoined = d.join(member_id, protocols=[("range", b"new")])  # a rebalance waits for it
    assert group.state is GroupState.PREPARING_REBALANCE and rejoined.ticket is not None
    assert rejoined.ticket not in d.answers

    left = d.take(d.core.leave_group("g", [(pending, None, "shutting down")]))
    assert left.reply == (E.none, [E.none])
    assert group.pending_members == set()
    assert pending_key("g", pending) not in d.timers
    # Every known member has rejoined and none is pending: the join completes now, without
    # the join timer firing.
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert join_key("g") not in d.timers
    answer = d.answers.pop(rejoined.ticket)
    assert answer.error == E.none and answer.generation_id == generation + 1
    assert [member for member, _, _ in answer.members] == [member_id]  # the leader's answer
    assert "member_left" in d.events
