"""Who a console login is: the same credentials as the RAGPipeline's /mcp endpoint.

    Credentials(config, verifier, operator=None).check(secret) -> (Principal, expires_at | None)

An API key or a JWT of the auth config (NucleusTokenVerifier, principal_from_access_token:
tenant, user, groups and roles from the key entry or the JWT claims), or, with authentication
inside the stack, the operator's token from the trust bundle. Machine credentials are refused:
a trusted platform's key (it acts for others) and a peer stack's key. Every refusal reads the
same to the browser (Unauthenticated); the verifier audits the reason.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from shared.auth.config import AuthConfig
from shared.auth.principals import principal_from_access_token
from shared.auth.verifier import NucleusTokenVerifier, TokenRejected
from shared.errors import NucleusError, Unauthenticated
from shared.identity import OPERATOR, Principal

REFUSED = "the credential was not accepted (an API key or a JWT of this stack)"


class Credentials:
    def __init__(self, config: AuthConfig, verifier: NucleusTokenVerifier, *,
                 operator: Callable[[str], Principal] | None = None,
                 knows_operator: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._verifier = verifier
        self._operator = operator
        self._knows_operator = knows_operator
        self._clock = clock

    def check(self, secret: str) -> tuple[Principal, float | None]:
        secret = (secret or "").strip()
        if not secret:
            raise Unauthenticated(REFUSED)
        if self._operator is not None and self._knows_operator is not None and self._knows_operator(secret):
            try:
                principal = self._operator(secret)
            except NucleusError:
                raise Unauthenticated(REFUSED) from None
            if not principal.has_role(OPERATOR):
                raise Unauthenticated(REFUSED)          # services do not log in
            return principal, None
        try:
            token = self._verifier.authenticate(secret)
        except TokenRejected:
            raise Unauthenticated(REFUSED) from None
        if token.expires_at is not None and token.expires_at <= self._clock():
            raise Unauthenticated(REFUSED)
        claims: dict[str, Any] = token.claims or {}
        entry = next((k for k in self._config.api_keys if k.key_id == claims.get("key_id")), None) \
            if claims.get("auth_method") == "api_key" else None
        if claims.get("trusted_platform") or (entry is not None and entry.peer_stack):
            raise Unauthenticated(REFUSED)
        principal = principal_from_access_token(token, None, self._config)
        return principal, float(token.expires_at) if token.expires_at is not None else None


__all__ = ["Credentials", "REFUSED"]
