"""Identities inside the stack: which process is calling, and for whom.

Every service (`knowledge_store`, `llm_orchestration`, `rag_pipeline`) and the operator (the
`nucleus` CLI) owns an Ed25519 key pair. Its private key stays with it (`<name>.key`, mode 0600,
in the identity directory); the public keys form the trust bundle (`trust.json`) that every
service reads. A call between them carries `authorization: Bearer <JWT>` signed (EdDSA) by the
caller, one of:

    service token    iss = sub = the caller, aud = the callee                        (5 minutes)
    on-behalf-of     iss = the caller, aud = the callee, sub = the end user, with    (2 minutes)
                     tenant, groups, session_tags, roles and act = {"sub": caller}
    operator token   iss = sub = "operator", aud = the callee, optionally a tenant   (1 hour)
    for the operator a service token with `for_operator: true`: the caller verified the operator's
                     own token and works for it; the callee sees the calling service (no role),
                     marked `extra["for_operator"]`, which only a policy naming it honours

The end user's own credential never travels (no token passthrough): RAGPipeline verifies it
and then asserts the user with its own key. The callee accepts a token only if its key id is
in the bundle, the signature verifies with that key, `iss` is the key's owner, `aud` is the
callee itself, it has not expired, and the owner may call the callee at all (`CALLERS`).

Made, rotated and revoked by `nucleus identity` (cli/identity.py): `init` creates the missing
key pairs, `rotate NAME` replaces NAME's key (the old public key stays trusted until `revoke`),
`revoke KID` removes a public key from the bundle. Services re-read `trust.json` when it
changes (checked at most once a second), so a revocation takes effect without a restart.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from shared.auth.verifier import TokenRejected
from shared.errors import InvalidArgument, PermissionDenied, Unauthenticated
from shared.identity import ADMIN, FOR_OPERATOR, OPERATOR, TENANT_ID, Principal
from shared.telemetry.prometheus import count_refusal

log = logging.getLogger(__name__)

SERVICES = ("knowledge_store", "llm_orchestration", "rag_pipeline")
PRINCIPALS = (*SERVICES, OPERATOR)
#: Which principals may call which service (end users reach only rag_pipeline, with their own keys).
CALLERS: dict[str, frozenset[str]] = {
    "knowledge_store": frozenset({"rag_pipeline", OPERATOR}),
    "llm_orchestration": frozenset({"knowledge_store", "rag_pipeline", OPERATOR}),
    "rag_pipeline": frozenset({OPERATOR}),
}
ALGORITHM = "EdDSA"
TRUST_FILE = "trust.json"
SCRAPE_TOKEN_FILE = "metrics-scrape.token"
SERVICE_TTL_S = 300
OBO_TTL_S = 120
OPERATOR_TTL_S = 3600
LEEWAY_S = 5
_CACHE_SIZE = 4096


def key_file(directory: Path, name: str) -> Path:
    return directory / f"{name}.key"


def scrape_token_file(identity_dir: Path) -> Path:
    """The bearer token Prometheus sends for `/metrics` (shared/auth/scrape.py checks it)."""
    return Path(identity_dir) / SCRAPE_TOKEN_FILE


def ensure_scrape_token(identity_dir: Path) -> Path | None:
    """Make the scrape token once (0600; O_EXCL: several services starting at once make one); None
    when the directory is read-only and has none (then only operator tokens are accepted)."""
    path = scrape_token_file(identity_dir)
    if path.exists():
        return path
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    except OSError as err:
        log.warning("no metrics scrape token (%s); /metrics accepts operator tokens only", err.strerror)
        return None
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return path


# ---------------------------------------------------------------------------- making and rotating keys
def _new_key(directory: Path, name: str) -> dict[str, str]:
    """Write a fresh private key for `name` (0600) and return its bundle entry."""
    private = Ed25519PrivateKey.generate()
    kid = f"{name}-{secrets.token_hex(4)}"
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    path = key_file(directory, name)
    tmp = path.with_suffix(".key.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(json.dumps({"kid": kid, "principal": name}).encode() + b"\n" + pem)
    os.replace(tmp, path)
    public = private.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return {"kid": kid, "principal": name, "public_key": public, "created_unix": int(time.time())}


def _read_bundle(directory: Path) -> dict[str, Any]:
    path = directory / TRUST_FILE
    if not path.exists():
        return {"version": 1, "keys": []}
    return json.loads(path.read_text())


def _write_bundle(directory: Path, bundle: dict[str, Any]) -> None:
    path = directory / TRUST_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(bundle, indent=2))
    os.replace(tmp, path)


def ensure_identities(directory: Path, names: tuple[str, ...] = PRINCIPALS) -> Path:
    """Create the key pairs of `names` that do not exist yet, and the trust bundle. Idempotent."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    bundle = _read_bundle(directory)
    changed = False
    for name in names:
        if not key_file(directory, name).exists():
            bundle["keys"].append(_new_key(directory, name))
            changed = True
    if changed or not (directory / TRUST_FILE).exists():
        _write_bundle(directory, bundle)
    ensure_scrape_token(directory)
    return directory


def rotate(directory: Path, name: str) -> str:
    """A new key for `name`; its old public keys stay trusted until revoked. Returns the new kid."""
    if name not in PRINCIPALS:
        raise InvalidArgument("name", f"must be one of {', '.join(PRINCIPALS)}, got {name!r}")
    bundle = _read_bundle(directory)
    entry = _new_key(directory, name)
    bundle["keys"].append(entry)
    _write_bundle(directory, bundle)
    return entry["kid"]


def revoke(directory: Path, kid: str) -> None:
    bundle = _read_bundle(directory)
    kept = [k for k in bundle["keys"] if k["kid"] != kid]
    if len(kept) == len(bundle["keys"]):
        raise InvalidArgument("kid", f"no key {kid!r} in {directory / TRUST_FILE}")
    bundle["keys"] = kept
    _write_bundle(directory, bundle)


def list_keys(directory: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k != "public_key"} for entry in _read_bundle(directory)["keys"]]


# ---------------------------------------------------------------------------- signing
class ServiceSigner:
    """Signs the tokens one principal presents. Tokens are cached and re-signed when less than
    a third of their lifetime is left, so a hot path signs about once a minute per user."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey, kid: str, *,
                 now: Callable[[], float] = time.time) -> None:
        self.name = name
        self.kid = kid
        self._key = private_key
        self._now = now
        self._cache: OrderedDict[tuple, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, directory: Path, name: str, **kw: Any) -> ServiceSigner:
        path = key_file(directory, name)
        try:
            head, _, pem = path.read_bytes().partition(b"\n")
            meta = json.loads(head)
            key = serialization.load_pem_private_key(pem, password=None)
        except (OSError, ValueError) as err:
            raise InvalidArgument("identity_dir", f"cannot read the key of {name!r} at {path}: {err}") from None
        if not isinstance(key, Ed25519PrivateKey) or meta.get("principal") != name:
            raise InvalidArgument("identity_dir", f"{path} is not an Ed25519 key of {name!r}")
        return cls(name, key, str(meta["kid"]), **kw)

    def token(self, audience: str, acting_for: Principal | None = None, *, tenant: str = "",
              for_operator: bool = False) -> str:
        """The bearer token for one call to `audience`, as this principal or for `acting_for`;
        `for_operator`: a service's call for the operator it verified (module docstring)."""
        for_operator = for_operator and acting_for is None and self.name != OPERATOR
        if acting_for is not None:
            ident = (audience, acting_for.tenant_id, acting_for.user_id, acting_for.groups,
                     acting_for.session_tags, acting_for.roles)
            ttl = OBO_TTL_S
        else:
            ident = (audience, tenant, for_operator)
            ttl = OPERATOR_TTL_S if self.name == OPERATOR else SERVICE_TTL_S
        now = self._now()
        with self._lock:
            hit = self._cache.get(ident)
            if hit is not None and hit[1] - now > ttl / 3:
                self._cache.move_to_end(ident)
                return hit[0]
        claims: dict[str, Any] = {"iss": self.name, "aud": audience, "iat": int(now), "exp": int(now + ttl)}
        if acting_for is not None:
            claims.update(sub=acting_for.user_id, tenant=acting_for.tenant_id, groups=list(acting_for.groups),
                          session_tags=list(acting_for.session_tags), roles=list(acting_for.roles),
                          act={"sub": self.name})
        else:
            claims["sub"] = self.name
            if tenant:
                claims["tenant"] = tenant
            if for_operator:
                claims[FOR_OPERATOR] = True
        token = jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self.kid})
        with self._lock:
            self._cache[ident] = (token, now + ttl)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return token


# ---------------------------------------------------------------------------- verifying
@dataclass(frozen=True, slots=True)
class _TrustedKey:
    principal: str
    key: Ed25519PublicKey


class ServiceVerifier:
    """Verifies the tokens presented to one service (`audience`) against the trust bundle."""

    def __init__(self, directory: Path, audience: str, *, now: Callable[[], float] = time.time,
                 reload_interval_s: float = 1.0) -> None:
        self.directory = directory
        self.audience = audience
        self._now = now
        self._reload_interval_s = reload_interval_s
        self._keys: dict[str, _TrustedKey] = {}
        self._mtime = -1.0
        self._checked = 0.0
        self._cache: OrderedDict[str, tuple[Principal, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._reload(force=True)

    def _reload(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self._reload_interval_s:
            return
        self._checked = now
        path = self.directory / TRUST_FILE
        try:
            mtime = path.stat().st_mtime
        except OSError as err:
            if force:
                raise InvalidArgument("identity_dir", f"no trust bundle at {path}: {err}") from None
            return
        if mtime == self._mtime:
            return
        try:
            entries = json.loads(path.read_text())["keys"]
            keys = {}
            for e in entries:
                public = serialization.load_pem_public_key(e["public_key"].encode())
                if isinstance(public, Ed25519PublicKey) and e["principal"] in PRINCIPALS:
                    keys[str(e["kid"])] = _TrustedKey(str(e["principal"]), public)
        except (OSError, ValueError, KeyError, TypeError) as err:
            if force:
                raise InvalidArgument("identity_dir", f"{path} is not a valid trust bundle: {err}") from None
            log.error("trust bundle %s unreadable (%s); keeping the previous one", path, err)
            return
        with self._lock:
            self._keys, self._mtime = keys, mtime
            self._cache.clear()       # a revoked key must not live on in the cache
        log.info("trust bundle loaded: %d keys", len(keys))

    def knows(self, token: str) -> bool:
        """Whether `token` claims to be signed by a key of the bundle (no verification)."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            return False
        self._reload()
        return isinstance(kid, str) and kid in self._keys

    def verify(self, token: str) -> Principal:
        """The principal the token stands for; Unauthenticated / PermissionDenied otherwise (each
        refusal counted in nucleus_auth_refusals_total{reason} of this service)."""
        try:
            return self._verify(token)
        except TokenRejected as err:
            count_refusal(self.audience, err.reason)
            raise
        except PermissionDenied:
            count_refusal(self.audience, "caller_not_allowed")
            raise

    def _verify(self, token: str) -> Principal:
        self._reload()
        now = self._now()
        with self._lock:
            hit = self._cache.get(token)
            if hit is not None and hit[1] > now:
                return hit[0]
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            raise TokenRejected("malformed", "the service token is not a JWT") from None
        trusted = self._keys.get(kid) if isinstance(kid, str) else None
        if trusted is None:
            raise TokenRejected("unknown_key", "the service token's key is not in the trust bundle (revoked?)")
        try:
            claims = jwt.decode(token, trusted.key, algorithms=[ALGORITHM], audience=self.audience,
                                options={"require": ["exp", "iss", "aud", "sub"], "verify_exp": False,
                                         "verify_iat": False, "verify_nbf": False})
        except jwt.InvalidAudienceError:
            raise TokenRejected("wrong_audience", f"the service token is not for {self.audience}") from None
        except jwt.PyJWTError as err:
            raise TokenRejected("bad_signature", f"the service token does not verify: {type(err).__name__}") from None
        if not isinstance(claims["exp"], (int, float)) or claims["exp"] + LEEWAY_S < now:
            raise TokenRejected("expired", "the service token has expired")     # against our clock
        if claims["iss"] != trusted.principal:
            raise TokenRejected("wrong_issuer", "the service token's issuer is not the owner of its key")
        if trusted.principal not in CALLERS.get(self.audience, frozenset()):
            raise PermissionDenied(f"{trusted.principal} may not call {self.audience}")
        principal = _principal(claims, trusted.principal, kid)
        with self._lock:
            self._cache[token] = (principal, float(claims["exp"]))
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return principal


def _strings(claims: dict[str, Any], name: str) -> tuple[str, ...]:
    value = claims.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TokenRejected("claims", f"the service token's {name} claim must be a list of strings")
    return tuple(value)


def _principal(claims: dict[str, Any], owner: str, kid: str) -> Principal:
    tenant = claims.get("tenant", "")
    if tenant and (not isinstance(tenant, str) or not TENANT_ID.match(tenant)):
        raise TokenRejected("claims", "the service token's tenant claim is not a tenant id")
    if "act" in claims:           # on behalf of an end user
        if owner == OPERATOR or not tenant:
            raise TokenRejected("claims", "an on-behalf-of assertion needs a service issuer and a tenant")
        roles = tuple(r for r in _strings(claims, "roles") if r != OPERATOR)   # only the operator's key says so
        return Principal(tenant_id=tenant, user_id=str(claims["sub"]), groups=_strings(claims, "groups"),
                         session_tags=_strings(claims, "session_tags"), roles=roles,
                         auth_method="on_behalf_of", key_id=kid, extra={"service": owner})
    if owner == OPERATOR:
        return Principal(tenant_id=tenant, user_id=OPERATOR, roles=(ADMIN, OPERATOR), auth_method=OPERATOR,
                         key_id=kid, extra={"service": OPERATOR})
    extra = {"service": owner}
    if FOR_OPERATOR in claims:
        if claims[FOR_OPERATOR] is not True:
            raise TokenRejected("claims", f"the service token's {FOR_OPERATOR} claim must be true when present")
        extra[FOR_OPERATOR] = "1"               # the caller verified the operator; grants no role
    return Principal(tenant_id="", user_id=f"service:{owner}", auth_method="service", key_id=kid, extra=extra)


def bearer(metadata: dict[str, str]) -> str:
    """The token of `authorization: Bearer <token>` metadata / headers; Unauthenticated if absent."""
    header = metadata.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise Unauthenticated("missing bearer token: send 'authorization: Bearer <token>' metadata")
    return credential.strip()


__all__ = [
    "CALLERS", "PRINCIPALS", "SERVICES", "ServiceSigner", "ServiceVerifier", "bearer",
    "ensure_identities", "ensure_scrape_token", "key_file", "list_keys", "revoke", "rotate", "scrape_token_file",
]
