"""Kafka's channel mute state machine (``KafkaChannel.ChannelMuteState``), sans-IO.

A connection's reader consults this to decide whether it may read the next frame, and the
transitions are exactly Kafka's; an event that is not allowed in the current state raises
:class:`IllegalMuteTransition` (Kafka throws IllegalStateException and closes the channel).
"""

from __future__ import annotations

import enum

import attrs


class MuteState(enum.Enum):
    NOT_MUTED = "NOT_MUTED"
    MUTED = "MUTED"
    MUTED_AND_RESPONSE_PENDING = "MUTED_AND_RESPONSE_PENDING"
    MUTED_AND_THROTTLED = "MUTED_AND_THROTTLED"
    MUTED_AND_THROTTLED_AND_RESPONSE_PENDING = "MUTED_AND_THROTTLED_AND_RESPONSE_PENDING"


class MuteEvent(enum.Enum):
    REQUEST_RECEIVED = "REQUEST_RECEIVED"
    RESPONSE_SENT = "RESPONSE_SENT"
    THROTTLE_STARTED = "THROTTLE_STARTED"
    THROTTLE_ENDED = "THROTTLE_ENDED"


class IllegalMuteTransition(Exception):
    pass


_S = MuteState
_E = MuteEvent
_TRANSITIONS: dict[tuple[MuteState, MuteEvent], MuteState] = {
    (_S.MUTED, _E.REQUEST_RECEIVED): _S.MUTED_AND_RESPONSE_PENDING,
    (_S.MUTED_AND_RESPONSE_PENDING, _E.RESPONSE_SENT): _S.MUTED,
    (_S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, _E.RESPONSE_SENT): _S.MUTED_AND_THROTTLED,
    (_S.MUTED_AND_RESPONSE_PENDING, _E.THROTTLE_STARTED): _S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING,
    (_S.MUTED_AND_THROTTLED, _E.THROTTLE_ENDED): _S.MUTED,
    (_S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, _E.THROTTLE_ENDED): _S.MUTED_AND_RESPONSE_PENDING,
}

_BY_VALUE: dict[tuple[str, str], MuteState] = {
    (state._value_, event._value_): new for (state, event), new in _TRANSITIONS.items()}


@attrs.define
class ChannelMute:
    """The mute state of one connection."""

    _state: MuteState = MuteState.NOT_MUTED

    @property
    def state(self) -> MuteState:
        return self._state

    @property
    def muted(self) -> bool:
        return self._state is not MuteState.NOT_MUTED

    def mute(self) -> None:
        """Stop reading. Only from NOT_MUTED, as in Kafka (otherwise a no-op)."""
        if self._state is MuteState.NOT_MUTED:
            self._state = MuteState.MUTED

    def maybe_unmute(self) -> bool:
        """Resume reading if only plain-muted; returns whether the channel is now unmuted."""
        if self._state is MuteState.MUTED:
            self._state = MuteState.NOT_MUTED
        return self._state is MuteState.NOT_MUTED

    def handle(self, event: MuteEvent) -> None:
        # Keyed by the members' plain ``_value_`` strings: an Enum member hashes through a
        # Python-level ``__hash__`` and this runs twice per request.
        new_state = _BY_VALUE.get((self._state._value_, event._value_))
        if new_state is None:
            raise IllegalMuteTransition(f"cannot handle {event.name} in state {self._state.name}")
        self._state = new_state
