"""SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

The SASL exchange itself is :class:`~trio_broker.security.sasl.SaslAuthenticator` (sans-IO), one
per connection of a SASL listener (``ConnectionInfo.auth``); the connection's reader refuses
everything but ApiVersions and these two APIs until it is authenticated. A failed authentication
is answered with SASL_AUTHENTICATION_FAILED after ``connection.failed.authentication.delay.ms``
(a parked wait in the purgatory: no handler task is held), then the connection closes.
After a SaslHandshake v0 the tokens come bare, without Kafka headers: the connection's reader
serves them (:mod:`trio_broker.security.raw_sasl`), no handler sees them.

With ACLs on, DescribeUserScramCredentials needs DESCRIBE and AlterUserScramCredentials ALTER
on the cluster (KafkaApis), else CLUSTER_AUTHORIZATION_FAILED for the whole request.
"""

from __future__ import annotations

import datetime
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from ...observability.log import emit
from ...security.sasl import AuthenticationFailed, State, loggable_principal
from ...security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    MIN_ITERATIONS,
    MIN_SALT_BYTES,
    ScramCredential,
    credential_from_salted,
)
from ..acl import AclOperation, ResourceType
from ..context import CloseConnection, Parked, RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51


@api_handler(SASL_HANDSHAKE, 0, 1, control_plane=True)
async def handle_sasl_handshake(ctx: RequestContext, body: Any) -> Any:
    module = response_module(SASL_HANDSHAKE, ctx.api_version)
    auth = ctx.connection.auth
    if auth is None:
        # KafkaApis answers a handshake on a listener without SASL (and after authentication).
        return module.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state,
                                            mechanisms=())
    enabled = tuple(auth.mechanisms)
    if auth.state not in (State.HANDSHAKE, State.COMPLETE):
        ctx.broker.authentication_metrics.failed(ctx.connection.listener)
        raise CloseConnection("illegal_sasl_state")
    if auth.state is State.COMPLETE and not auth.reauthenticable:
        return module.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state,
                                            mechanisms=enabled)
    # v0: the tokens that follow are bare, the connection's reader serves them (raw_sasl).
    if not auth.handshake(body.mechanism, raw_tokens=ctx.api_version == 0):
        # Kafka sends UNSUPPORTED_SASL_MECHANISM with the enabled list, then closes (and
        # counts a failed authentication: UnsupportedSaslMechanismException).
        ctx.broker.authentication_metrics.failed(ctx.connection.listener)
        raise CloseConnection("unsupported_sasl_mechanism", module.SaslHandshakeResponse(
            error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled))
    return module.SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=enabled)


@api_handler(SASL_AUTHENTICATE, 0, 2, control_plane=True)
async def handle_sasl_authenticate(ctx: RequestContext, body: Any) -> Any:
    module = response_module(SASL_AUTHENTICATE, ctx.api_version)
    connection = ctx.connection
    auth = connection.auth

    def answer(code: ErrorCode, message: str | None, token: bytes = b"",
               lifetime_ms: int = 0) -> Any:
        return build(module.SaslAuthenticateResponse, error_code=code, error_message=message,
                     auth_bytes=token,
                     session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))

    if auth is None or (auth.state is State.COMPLETE and not auth.reauthenticating):
        return answer(ErrorCode.illegal_sasl_state,
                      "SaslAuthenticate request received after successful authentication"
                      if auth is not None else "SASL is not enabled on this listener")
    if auth.state is not State.AUTHENTICATE:
        # Before the handshake: Kafka's IllegalSaslStateException closes without an answer.
        ctx.broker.authentication_metrics.failed(connection.listener)
        raise CloseConnection("illegal_sasl_state")
    reauthentication = auth.reauthenticating
    try:
        done, token = auth.authenticate(bytes(body.auth_bytes), trio.current_time())
    except AuthenticationFailed as failed:
        ctx.broker.authentication_metrics.failed(connection.listener)
        emit("authentication_failed", mechanism=auth.mechanism,
             principal=loggable_principal(failed.principal),
             error="SASL_AUTHENTICATION_FAILED", detail=failed.message)
        response = answer(ErrorCode.sasl_authentication_failed, failed.message)
        delay = ctx.broker.config.connection_failed_authentication_delay_ms / 1000
        purgatory = ctx.broker.purgatory

        async def fail_later() -> Any:
            # A Trio deadline in the purgatory: the handler task is free meanwhile.
            with purgatory.delay(delay):
                await trio.sleep_forever()
            raise CloseConnection("authentication_failed", response)

        return Parked(fail_later)
    if not done:
        return answer(ErrorCode.none, None, token)
    connection.principal = auth.principal
    ctx.broker.authentication_metrics.succeeded(connection.listener,
                                                reauthentication=reauthentication)
    emit("authentication_succeeded", mechanism=auth.mechanism, principal=auth.principal,
         reauthentication=reauthentication)
    return answer(ErrorCode.none, None, token, auth.reauth_ms)


#: Kafka's message of ClusterAuthorizationException (Errors.CLUSTER_AUTHORIZATION_FAILED).
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."


@api_handler(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, ctx.api_version)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        # DescribeUserScramCredentialsRequest.getErrorResponse: the error, and one result
        # (no user name) per user asked for.
        denied = build(module.DescribeUserScramCredentialsResult, user="",
                       error_code=ErrorCode.cluster_authorization_failed,
                       error_message=CLUSTER_AUTHORIZATION_FAILED, credential_infos=())
        return build(module.DescribeUserScramCredentialsResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message=CLUSTER_AUTHORIZATION_FAILED,
                     results=(denied,) * len(body.users or ()))
    described = await trio.to_thread.run_sync(ctx.broker.scram.describe)
    users = body.users
    results = []

    def result(user: str, code: ErrorCode, message: str | None, infos: dict[str, int]) -> Any:
        return build(module.DescribeUserScramCredentialsResult, user=user, error_code=code,
                     error_message=message, credential_infos=tuple(
                         build(module.CredentialInfo, mechanism=MECHANISMS[m][1], iterations=i)
                         for m, i in sorted(infos.items())))

    if users is None or len(users) == 0:
        # No filter: every user with a credential (Kafka's ControllerApis/ScramControlManager).
        results = [result(user, ErrorCode.none, None, infos)
                   for user, infos in sorted(described.items())]
    else:
        names = [u.name for u in users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(result(name, ErrorCode.duplicate_resource,
                                      f"Cannot describe SCRAM credentials for the same user "
                                      f"twice in a single request: {name}", {}))
            elif name in described:
                results.append(result(name, ErrorCode.none, None, described[name]))
            else:
                results.append(result(name, ErrorCode.resource_not_found,
                                      f"Attempt to describe nonexistent user: {name}", {}))
    return build(module.DescribeUserScramCredentialsResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, error_message=None, results=tuple(results))


@api_handler(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, body: Any) -> Any:
    """Kafka's checks (ScramControlManager): one change per user and mechanism, known
    mechanisms, 4096..16384 iterations, a deletion only of an existing credential; every change
    of a user fails if one of that user's changes fails."""
    module = response_module(ALTER_USER_SCRAM_CREDENTIALS, ctx.api_version)
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        # AlterUserScramCredentialsRequest.getErrorResponse: each user named, sorted.
        named = sorted({c.name for c in (*body.deletions, *body.upsertions)})
        return build(module.AlterUserScramCredentialsResponse, throttle_time=throttle(ctx),
                     results=tuple(build(module.AlterUserScramCredentialsResult, user=user,
                                         error_code=ErrorCode.cluster_authorization_failed,
                                         error_message=CLUSTER_AUTHORIZATION_FAILED)
                                   for user in named))
    store = ctx.broker.scram
    existing = await trio.to_thread.run_sync(store.describe)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    order: list[str] = []
    for change in (*body.deletions, *body.upsertions):
        key = (change.name, int(change.mechanism))
        seen[key] = seen.get(key, 0) + 1
        if change.name not in order:
            order.append(change.name)

    def fail(user: str, code: ErrorCode, message: str) -> None:
        errors.setdefault(user, (code, message))

    for (user, _mech), count in seen.items():
        if count > 1:
            fail(user, ErrorCode.duplicate_resource,
                 "A user credential cannot be altered twice in the same request")
    for change in body.deletions:
        mechanism = MECHANISM_BY_TYPE.get(int(change.mechanism))
        if not change.name:
            fail(change.name, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            fail(change.name, ErrorCode.unsupported_sasl_mechanism,
                 "Unknown SCRAM mechanism")
        elif mechanism not in existing.get(change.name, {}):
            fail(change.name, ErrorCode.resource_not_found,
                 "Attempt to delete a user credential that does not exist")
    upserts: list[tuple[str, str, ScramCredential]] = []
    for change in body.upsertions:
        mechanism = MECHANISM_BY_TYPE.get(int(change.mechanism))
        iterations = int(change.iterations)
        if not change.name:
            fail(change.name, ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            fail(change.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif iterations < MIN_ITERATIONS:
            fail(change.name, ErrorCode.unacceptable_credential, "Too few iterations")
        elif iterations > MAX_ITERATIONS:
            fail(change.name, ErrorCode.unacceptable_credential, "Too many iterations")
        elif not change.salted_password:
            fail(change.name, ErrorCode.unacceptable_credential,
                 "Salted password must not be empty")
        elif len(change.salt) < MIN_SALT_BYTES:
            # scramp (RFC 5802 practice) refuses shorter salts; clients send 16 to 64 bytes.
            fail(change.name, ErrorCode.unacceptable_credential,
                 f"Salt must be at least {MIN_SALT_BYTES} bytes")
        else:
            upserts.append((change.name, mechanism, credential_from_salted(
                mechanism, bytes(change.salt), bytes(change.salted_password), iterations)))
    deletions = [(d.name, MECHANISM_BY_TYPE[int(d.mechanism)]) for d in body.deletions
                 if d.name not in errors]
    upserts = [u for u in upserts if u[0] not in errors]
    if deletions or upserts:
        await trio.to_thread.run_sync(store.alter, upserts, deletions)
    results = tuple(
        build(module.AlterUserScramCredentialsResult, user=user,
              error_code=errors.get(user, (ErrorCode.none, None))[0],
              error_message=errors.get(user, (ErrorCode.none, None))[1])
        for user in order)
    return build(module.AlterUserScramCredentialsResponse, throttle_time=throttle(ctx),
                 results=results)
