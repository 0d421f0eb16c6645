"""One service's side of zero trust inside the stack, built once in its `main` from settings.

    ServiceAuth.load(name, identity_dir)   its signer (its own private key) and its verifier
                                           (the trust bundle, audience = its own name)
    .client_interceptors(callee)           sign every call this process makes to `callee`
    .server_interceptor(authenticate)      verify every gRPC call this process serves
    .mcp_token_verifier()                  the MCP SDK's TokenVerifier for its /mcp endpoint

No identity directory configured = authentication off (the 127.0.0.1 development stack):
`ServiceAuth.load` returns None and every caller is served as today.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from shared.auth.api_keys import fingerprint
from shared.auth.grpc_auth import AuthServerInterceptor, signing_interceptors
from shared.auth.service_identity import ServiceSigner, ServiceVerifier, bearer
from shared.identity import OPERATOR
from shared.errors import NucleusError
from shared.identity import Principal

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken


@dataclass
class ServiceAuth:
    name: str
    signer: ServiceSigner
    verifier: ServiceVerifier

    @classmethod
    def load(cls, name: str, identity_dir: Path | None) -> ServiceAuth | None:
        if identity_dir is None:
            return None
        return cls(name, ServiceSigner.load(identity_dir, name), ServiceVerifier(identity_dir, name))

    def client_interceptors(self, callee: str) -> list[Any]:
        return signing_interceptors(self.signer, callee)

    def authenticate(self, metadata: Mapping[str, str]) -> Principal:
        """A service, operator or on-behalf-of token from the trust bundle."""
        return self.verifier.verify(bearer(metadata))

    def server_interceptor(self, authenticate: Callable[[Mapping[str, str]], Principal] | None = None
                           ) -> AuthServerInterceptor:
        return AuthServerInterceptor(authenticate or self.authenticate)

    def mcp_token_verifier(self) -> ServiceTokenVerifier:
        return ServiceTokenVerifier(self.verifier)


class ServiceTokenVerifier:
    """The MCP SDK TokenVerifier over the trust bundle: only the operator may use the /mcp
    endpoint of KnowledgeStore and LlmOrchestration (services talk to each other over gRPC);
    anything else gets HTTP 401."""

    def __init__(self, verifier: ServiceVerifier) -> None:
        self._verifier = verifier

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken   # here: the CLI imports this module, never the MCP SDK

        try:
            p = self._verifier.verify(token)
        except NucleusError:
            return None
        if not p.has_role(OPERATOR):
            return None
        return AccessToken(
            token=fingerprint(token), client_id=p.key_id, scopes=[], expires_at=None, subject=p.user_id,
            claims={"tenant": p.tenant_id, "user": p.user_id, "groups": list(p.groups), "roles": list(p.roles),
                    "trusted_platform": False, "auth_method": p.auth_method, "key_id": p.key_id})


def operator_interceptors(identity_dir: Path, callee: str) -> list[Any] | None:
    """Interceptors that sign calls to `callee` as the operator, if the operator key exists in
    `identity_dir` (authentication is on); None otherwise."""
    from shared.auth.service_identity import key_file

    if not key_file(identity_dir, OPERATOR).exists():
        return None
    return signing_interceptors(ServiceSigner.load(identity_dir, OPERATOR), callee)


__all__ = ["ServiceAuth", "ServiceTokenVerifier", "operator_interceptors"]
