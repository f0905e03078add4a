"""Turns: one pipelining connection's Produce requests handled one at a time, in the order the
connection read them.

Kafka never has two requests of one connection in hand (the channel is muted until the response
is sent), so a producer's batches are appended in the order it sent them. With
``connection.max.inflight.requests`` > 1 several requests of one connection are in hand at once,
in different handler tasks that Trio may run in any order; without turns a later Produce could
append before an earlier one (an idempotent producer then sees OUT_OF_ORDER_SEQUENCE_NUMBER, any
other producer its records reordered). The reader takes a ticket for each Produce it reads;
the handler pool starts a request when its ticket's turn has come and finishes the turn when
the handler returns, whatever the outcome.
"""

from __future__ import annotations

import attrs
import trio


@attrs.define
class Turns:
    """Tickets in reading order; :meth:`wait` returns when every earlier ticket is finished."""

    _issued: int = 0
    #: The oldest ticket not finished: its turn.
    _current: int = 0
    #: Tickets finished before their turn (never started: their connection went away).
    _finished_early: set[int] = attrs.field(factory=set)
    _waiting: dict[int, trio.Event] = attrs.field(factory=dict)

    def issue(self) -> int:
        ticket = self._issued
        self._issued += 1
        return ticket

    def is_turn(self, ticket: int) -> bool:
        return ticket == self._current

    async def wait(self, ticket: int) -> None:
        """Until ``ticket``'s turn. No checkpoint when it is its turn already (the usual case:
        a request handled in its connection's task, which must not give the loop away)."""
        if ticket == self._current:
            return
        event = self._waiting[ticket] = trio.Event()
        try:
            await event.wait()
        finally:
            self._waiting.pop(ticket, None)

    def finish(self, ticket: int) -> None:
        """``ticket`` is done (handled, or dropped unhandled): the next turn may start."""
        if ticket != self._current:
            if ticket > self._current:
                self._finished_early.add(ticket)
            return
        current = ticket + 1
        while current in self._finished_early:
            self._finished_early.remove(current)
            current += 1
        self._current = current
        event = self._waiting.get(current)
        if event is not None:
            event.set()
