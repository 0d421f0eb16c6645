"""Signed on-behalf-of assertions between Nucleus stacks (federation, docs/FEDERATION.md).

A stack federating a remote Nucleus sends, per request, beside the source's own API key, an
assertion of the user it acts for: a JWT signed with the calling stack's Ed25519 key
(`services/rag_pipeline/federation/assertion.py`), `iss` = the calling stack's id, `aud` = the
remote stack's id, `sub` = the user, `groups`, valid two minutes.

The receiving stack accepts it only on an API key the operator marked as that peer's
(`peer_stack`, `peer_public_key`, `peer_groups` in the auth config): the principal is then the
user `<sub>@<peer stack>` in the key's tenant (the tenant the receiving stack maps the calling
stack to), with the asserted groups that `peer_groups` lists, and no role (roles never travel).
A peer key's request whose assertion is malformed, expired, for another audience, from another
issuer or signed by another key is refused, never served as the key itself; a peer key without
an assertion acts as the key (the calling stack itself).
"""
from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization

from shared.errors import Unauthenticated

HEADER_ASSERTION = "x-nucleus-assertion"
ALGORITHMS = ["EdDSA"]
MAX_ASSERTION_CHARS = 8_192
LIFETIME_S = 120
LEEWAY_S = 30


def check_public_key(pem: str) -> None:
    """ValueError unless `pem` is an Ed25519 public key in PEM."""
    try:
        key = serialization.load_pem_public_key(pem.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError) as err:
        raise ValueError(f"peer_public_key is not a PEM public key ({err})") from None
    if type(key).__name__ != "Ed25519PublicKey":
        raise ValueError("peer_public_key must be an Ed25519 public key")


def verify_assertion(token: str, *, public_pem: str, issuer: str, audience: str) -> dict[str, Any]:
    """The claims of a valid assertion from `issuer` for `audience`; Unauthenticated otherwise
    (the reason only, never the token)."""
    if not audience:
        raise Unauthenticated("this stack has no id, so it accepts no peer assertion")
    if not isinstance(token, str) or not token or len(token) > MAX_ASSERTION_CHARS:
        raise Unauthenticated("peer assertion is empty or too long")
    try:
        claims = jwt.decode(token.strip(), public_pem, algorithms=ALGORITHMS, audience=audience, issuer=issuer,
                            leeway=LEEWAY_S, options={"require": ["exp", "iat", "iss", "aud", "sub"]})
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("peer assertion has expired") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("peer assertion is for another stack") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("peer assertion is from another stack than its key's") from None
    except jwt.PyJWTError as err:
        raise Unauthenticated(f"peer assertion rejected ({type(err).__name__})") from None
    if int(claims["exp"]) - int(claims["iat"]) > LIFETIME_S + LEEWAY_S or int(claims["iat"]) > time.time() + LEEWAY_S:
        raise Unauthenticated("peer assertion lives longer than accepted")
    sub = claims.get("sub")
    groups = claims.get("groups", [])
    if not isinstance(sub, str) or not 0 < len(sub) <= 256 or any(ord(c) < 32 for c in sub):
        raise Unauthenticated("peer assertion names no valid user")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise Unauthenticated("peer assertion groups must be a list of strings")
    return claims
