"""Kafka's ``KafkaChannel.ChannelMuteState`` machine, transition by transition."""

from __future__ import annotations

import itertools

import pytest

from trio_broker.network.mute import ChannelMute, IllegalMuteTransition, MuteEvent, MuteState

S = MuteState
E = MuteEvent

# Kafka's KafkaChannel.handleChannelMuteEvent, and nothing else.
KAFKA_TRANSITIONS = {
    (S.MUTED, E.REQUEST_RECEIVED): S.MUTED_AND_RESPONSE_PENDING,
    (S.MUTED_AND_RESPONSE_PENDING, E.RESPONSE_SENT): S.MUTED,
    (S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, E.RESPONSE_SENT): S.MUTED_AND_THROTTLED,
    (S.MUTED_AND_RESPONSE_PENDING, E.THROTTLE_STARTED): S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING,
    (S.MUTED_AND_THROTTLED, E.THROTTLE_ENDED): S.MUTED,
    (S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, E.THROTTLE_ENDED): S.MUTED_AND_RESPONSE_PENDING,
}
ILLEGAL = [pair for pair in itertools.product(S, E) if pair not in KAFKA_TRANSITIONS]


def test_states_and_events_are_kafkas() -> None:
    assert {s.name for s in S} == {
        "NOT_MUTED", "MUTED", "MUTED_AND_RESPONSE_PENDING", "MUTED_AND_THROTTLED",
        "MUTED_AND_THROTTLED_AND_RESPONSE_PENDING",
    }
    assert {e.name for e in E} == {
        "REQUEST_RECEIVED", "RESPONSE_SENT", "THROTTLE_STARTED", "THROTTLE_ENDED",
    }
    assert len(ILLEGAL) == 5 * 4 - 6


def test_new_channel_is_not_muted() -> None:
    channel = ChannelMute()
    assert channel.state is S.NOT_MUTED
    assert not channel.muted


@pytest.mark.parametrize(("start", "event"), sorted(KAFKA_TRANSITIONS, key=str))
def test_kafka_transition(start: MuteState, event: MuteEvent) -> None:
    channel = ChannelMute(start)
    channel.handle(event)
    assert channel.state is KAFKA_TRANSITIONS[start, event]
    assert channel.muted


@pytest.mark.parametrize(("start", "event"), ILLEGAL, ids=lambda v: v.name)
def test_every_other_transition_is_illegal(start: MuteState, event: MuteEvent) -> None:
    channel = ChannelMute(start)
    with pytest.raises(IllegalMuteTransition) as info:
        channel.handle(event)
    assert event.name in str(info.value)
    assert start.name in str(info.value)
    assert channel.state is start  # the state is left alone


def test_mute_only_from_not_muted() -> None:
    channel = ChannelMute()
    channel.mute()
    assert channel.state is S.MUTED
    assert channel.muted
    for state in S:
        if state is S.NOT_MUTED:
            continue
        channel = ChannelMute(state)
        channel.mute()
        assert channel.state is state


def test_maybe_unmute_only_from_muted() -> None:
    channel = ChannelMute(S.MUTED)
    assert channel.maybe_unmute() is True
    assert channel.state is S.NOT_MUTED
    assert not channel.muted
    assert ChannelMute().maybe_unmute() is True  # already unmuted
    for state in (S.MUTED_AND_RESPONSE_PENDING, S.MUTED_AND_THROTTLED,
                  S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING):
        channel = ChannelMute(state)
        assert channel.maybe_unmute() is False
        assert channel.state is state


def received_request() -> ChannelMute:
    """A channel that has just read a complete request: muted, then REQUEST_RECEIVED."""
    channel = ChannelMute()
    channel.mute()
    channel.handle(E.REQUEST_RECEIVED)
    assert channel.state is S.MUTED_AND_RESPONSE_PENDING
    return channel


def test_one_request_in_flight_cycle() -> None:
    channel = received_request()
    channel.handle(E.RESPONSE_SENT)
    assert channel.maybe_unmute()
    assert channel.state is S.NOT_MUTED
    # and the next request goes through the same cycle
    channel.mute()
    channel.handle(E.REQUEST_RECEIVED)
    assert channel.state is S.MUTED_AND_RESPONSE_PENDING


def test_request_received_while_not_muted_is_illegal() -> None:
    with pytest.raises(IllegalMuteTransition):
        ChannelMute().handle(E.REQUEST_RECEIVED)


# SocketServerTest's four throttling outcomes: the processor handles StartThrottling (queued before
# the response, KIP-219), then the response's completion (Send) or NoOp, then tries to unmute.
# Send completion and NoOp both raise RESPONSE_SENT, so one test covers each pair of outcomes.
def test_response_with_throttled_channel_where_throttling_in_progress() -> None:
    channel = received_request()
    channel.handle(E.THROTTLE_STARTED)
    assert channel.state is S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING
    channel.handle(E.RESPONSE_SENT)  # both Send completion and NoOp raise RESPONSE_SENT
    assert channel.maybe_unmute() is False
    assert channel.state is S.MUTED_AND_THROTTLED
    # EndThrottling later: THROTTLE_ENDED then tryUnmute
    channel.handle(E.THROTTLE_ENDED)
    assert channel.maybe_unmute() is True
    assert channel.state is S.NOT_MUTED


def test_response_with_throttled_channel_where_throttling_already_done() -> None:
    channel = received_request()
    channel.handle(E.THROTTLE_STARTED)
    channel.handle(E.THROTTLE_ENDED)
    assert channel.maybe_unmute() is False  # the response is still pending
    assert channel.state is S.MUTED_AND_RESPONSE_PENDING
    channel.handle(E.RESPONSE_SENT)
    assert channel.maybe_unmute() is True
    assert channel.state is S.NOT_MUTED


def test_throttle_cannot_start_twice() -> None:
    channel = received_request()
    channel.handle(E.THROTTLE_STARTED)
    with pytest.raises(IllegalMuteTransition):
        channel.handle(E.THROTTLE_STARTED)
