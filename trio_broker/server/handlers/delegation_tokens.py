"""The delegation token APIs (keys 38-41, KIP-48) answered as a Kafka 3.9 broker answers them
without ``delegation.token.secret.key``: token authentication is not enabled here.

Kafka serves these APIs at every version whether tokens are enabled or not, so clients and
``kafka-delegation-tokens.sh`` get a Kafka error, not a closed connection. In Kafka's order:

1. ``allowTokenRequests``: a request over PLAINTEXT, over SSL without a client certificate
   (the principal is ANONYMOUS), or from a connection that authenticated with a token is
   DELEGATION_TOKEN_REQUEST_NOT_ALLOWED;
2. CreateDelegationToken for another owner needs CREATE_TOKENS on that user, else
   DELEGATION_TOKEN_AUTHORIZATION_FAILED;
3. otherwise DELEGATION_TOKEN_AUTH_DISABLED (the controller's ``DelegationTokenControlManager``
   and the broker's describe path with no secret key).

The answers carry Kafka's empty values: the owner and requester named, no token id, an empty
HMAC, no tokens, and timestamps -1 for a refusal (``ControllerApis``' ``prepareResponse``) but
0 when tokens are disabled (the controller's answer leaves them at their default). Issuing tokens (HMAC-SHA512 under a secret, SCRAM with
``tokenauth=true``) is not implemented: a broker given ``delegation.token.secret.key`` fails at
start-up, naming the key, instead of silently refusing tokens.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.error_response import NO_TIME
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN = 38, 39
EXPIRE_DELEGATION_TOKEN, DESCRIBE_DELEGATION_TOKEN = 40, 41

_DEFAULT_TIME = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def _time_of(code: ErrorCode) -> datetime.datetime:
    return _DEFAULT_TIME if code is ErrorCode.delegation_token_auth_disabled else NO_TIME


def _refusal(ctx: RequestContext) -> ErrorCode:
    """Kafka's ``allowTokenRequests``, then token authentication being disabled."""
    protocol = ctx.connection.security_protocol.upper()
    anonymous = ctx.connection.principal == "User:ANONYMOUS"
    if protocol == "PLAINTEXT" or (protocol == "SSL" and anonymous):
        return ErrorCode.delegation_token_request_not_allowed
    return ErrorCode.delegation_token_auth_disabled


def _principal(text: str) -> tuple[str, str]:
    kind, _, name = text.partition(":")
    return kind, name


@api_handler(CREATE_DELEGATION_TOKEN, 0, 3)
async def handle_create_delegation_token(ctx: RequestContext, body: Any) -> Any:
    module = response_module(CREATE_DELEGATION_TOKEN, ctx.api_version)
    requester = _principal(ctx.connection.principal)
    owner_name = getattr(body, "owner_principal_name", None)
    owner = (requester if not owner_name
             else (getattr(body, "owner_principal_type", None) or "User", owner_name))
    code = _refusal(ctx)
    if (code is ErrorCode.delegation_token_auth_disabled and owner != requester
            and not ctx.authorize(AclOperation.CREATE_TOKENS, ResourceType.USER,
                                  f"{owner[0]}:{owner[1]}")):
        code = ErrorCode.delegation_token_authorization_failed
    return build(module.CreateDelegationTokenResponse, error_code=code,
                 principal_type=owner[0], principal_name=owner[1],
                 token_requester_principal_type=requester[0],
                 token_requester_principal_name=requester[1], issue_timestamp=_time_of(code),
                 expiry_timestamp=_time_of(code), max_timestamp=_time_of(code), token_id="",
                 hmac=b"", throttle_time=throttle(ctx))


def _expiry_answer(ctx: RequestContext, api_key: int, response: str) -> Any:
    """Renew's and Expire's answer: the error and an expiry time."""
    code = _refusal(ctx)
    return build(getattr(response_module(api_key, ctx.api_version), response), error_code=code,
                 expiry_timestamp=_time_of(code), throttle_time=throttle(ctx))


@api_handler(RENEW_DELEGATION_TOKEN, 0, 2)
async def handle_renew_delegation_token(ctx: RequestContext, body: Any) -> Any:
    return _expiry_answer(ctx, RENEW_DELEGATION_TOKEN, "RenewDelegationTokenResponse")


@api_handler(EXPIRE_DELEGATION_TOKEN, 0, 2)
async def handle_expire_delegation_token(ctx: RequestContext, body: Any) -> Any:
    return _expiry_answer(ctx, EXPIRE_DELEGATION_TOKEN, "ExpireDelegationTokenResponse")


@api_handler(DESCRIBE_DELEGATION_TOKEN, 0, 3)
async def handle_describe_delegation_token(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_DELEGATION_TOKEN, ctx.api_version)
    return build(module.DescribeDelegationTokenResponse, error_code=_refusal(ctx), tokens=(),
                 throttle_time=throttle(ctx))
