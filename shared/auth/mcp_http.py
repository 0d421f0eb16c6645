"""MCP over HTTP as an OAuth resource server: the AuthSettings given to the MCP SDK, whose bearer
middleware then checks every request with our verifier (`shared.auth.verifier`)."""
from __future__ import annotations

from mcp.server.auth.settings import AuthSettings

from shared.auth.config import AuthConfig


def auth_settings(config: AuthConfig, public_base_url: str, *, advertise_resource: bool) -> AuthSettings:
    """AuthSettings for MCPServer: we are a resource server; tokens are checked by our verifier
    (audience included), so the SDK's own resource check stays off."""
    issuer = config.jwt.issuer if config.jwt is not None and config.jwt.issuer.startswith(("http://", "https://")) \
        else public_base_url
    return AuthSettings(issuer_url=issuer,
                        resource_server_url=f"{public_base_url.rstrip('/')}/mcp" if advertise_resource else None,
                        validate_token_resource=False if advertise_resource else None, required_scopes=None)


def service_auth_settings() -> AuthSettings:
    """AuthSettings for the /mcp endpoints of KnowledgeStore and LlmOrchestration, whose tokens
    come from the stack's trust bundle (no authorization server to advertise)."""
    return AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None, required_scopes=None)


__all__ = ["auth_settings", "service_auth_settings"]
