"""Bearer authentication: static API keys and JWTs become verified principals.

    config       AuthConfig, the JSON file at settings.auth_config (format in docs/MCP.md);
                 load_auth_config(), EMPTY_CONFIG
    api_keys     hash_key(), fingerprint(), add_key(); the key tool:
                 python -m shared.auth new-key --tenant T --user U [--groups a,b] [--trusted-platform]
    verifier     NucleusTokenVerifier, the MCP SDK's TokenVerifier: bearer token -> AccessToken | None;
                 TokenRejected
    principals   RequestIdentity: AccessToken (+ x-user-id / x-session-tags headers) -> Principal;
                 grpc_principal() for gRPC metadata
    mcp_http     auth_settings(), the SDK's AuthSettings for this server

API keys are stored only as SHA-256 hashes; the key itself is printed once when it is made.
Secrets never leave this package: AccessToken.token holds a fingerprint, not the token, and
failures are logged and audited by reason only.
"""
