"""SASL tokens without Kafka headers, as clients send them after SaslHandshake v0 (sans-IO).

Before KIP-152 (SaslAuthenticate, Kafka 1.0) a client that had sent SaslHandshake v0 sent each
SASL token as a bare frame: a 4-byte big-endian size and the token, no request header. Kafka
3.9's ``SaslServerAuthenticator.handleSaslToken`` still serves that (4.0 removed it): it feeds
the token to the SASL server and, when the server has something to say (a SCRAM challenge, the
empty answer to a PLAIN token), sends it back as a bare frame too. A failure has no answer:
there is no error field to put it in, so the connection closes (after
``connection.failed.authentication.delay.ms``).

Frames are cut by the connection's :class:`~trio_broker.protocol.framing.FrameDecoder`, whose
limit until authentication is ``sasl.server.max.receive.size`` (CVE-2022-34917), for these
frames as for requests. This module turns one token into what to do; it never touches a socket
or a clock (``now`` is the caller's).
"""

from __future__ import annotations

import attrs

from ..protocol.framing import frame
from .sasl import AuthenticationFailed, SaslAuthenticator


@attrs.frozen
class RawTokenOutcome:
    """What one bare token leads to.

    ``reply``: the bytes to send, size prefix included (None: send nothing). ``complete``: the
    client has authenticated (``SaslAuthenticator.principal`` says who). ``failure``: the
    authentication failed; send nothing, close the connection after the failure delay."""

    reply: bytes | None = None
    complete: bool = False
    failure: AuthenticationFailed | None = attrs.field(default=None, eq=False)


def serve_raw_token(auth: SaslAuthenticator, token: bytes, now: float) -> RawTokenOutcome:
    """Feed one bare token (a frame's payload) to ``auth``, which must expect one
    (:attr:`SaslAuthenticator.expects_raw_token`)."""
    if not auth.expects_raw_token:
        raise ValueError("no bare SASL token expected in this state")
    try:
        complete, response = auth.authenticate(token, now)
    except AuthenticationFailed as failed:
        return RawTokenOutcome(failure=failed)
    # Kafka sends the SASL server's answer whenever it is not null; PlainSaslServer and
    # ScramSaslServer never return null, so PLAIN's success is an empty frame (4 zero bytes),
    # which old clients wait for before they go on.
    return RawTokenOutcome(reply=frame(response), complete=complete)


__all__ = ["RawTokenOutcome", "serve_raw_token"]
