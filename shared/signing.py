"""Signed, expiring links to one knowledge entry: `{base}/documents/{entry_id}?t=&u=&g=&exp=&sig=`.

A federated result gets a redirect link instead (`sign_redirect`): the same parameters plus
`to=` (the remote's own http(s) URL of the document), all under the signature; opening it
re-checks that the link's user may still use that source, then redirects there.

The signature is HMAC-SHA256 (key: `settings.link_secret`) over a canonical JSON array of
the link's path, tenant, user, the user's groups at issue time, and the expiry (unix
seconds). Changing any of them — another entry, another user or tenant, more groups, a later
expiry — invalidates it. `verify_link` refuses tampered, malformed, expired links and links
issued to another user; the document route then re-checks that the entry still exists and
that those groups still see it, so revoking access also revokes outstanding links.

Without a configured secret a random one is made per process: links then stop working when
the process restarts (and are not shared between replicas), which is logged once at start.
Other signed values (e.g. search cursors) use a key derived from the secret for them alone
(`derive_key`), never the secret itself.

Signatures never reach logs (`shared.log` redacts `sig=`) or the audit trail.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Sequence
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from shared.errors import PermissionDenied
from shared.log import register_secret

log = logging.getLogger(__name__)

DOCUMENT_PREFIX = "/documents/"
_VERSION = "nucleus-link-v1"
_PARAMS = ("t", "u", "g", "exp", "sig")
_REDIRECT_PARAMS = (*_PARAMS, "to")
MAX_LINK_CHARS = 8_192


class LinkRejected(PermissionDenied):
    """A link that must not be honoured; `reason` is one of malformed, tampered, expired, wrong_user."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class LinkClaims:
    entry_id: str
    tenant_id: str
    user_id: str
    groups: tuple[str, ...]
    expires_unix: int
    target: str = ""                    # a redirect link's destination (a federated result's own URL)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class LinkSigner:
    def __init__(self, secret: bytes, base_url: str, ttl_s: int, *, now: Callable[[], float] = time.time) -> None:
        if len(secret) < 16:
            raise ValueError("the link secret must be at least 16 bytes")
        if ttl_s <= 0:
            raise ValueError(f"link_ttl_s must be positive, got {ttl_s}")
        self._secret = secret
        self.base_url = base_url.rstrip("/")
        self.ttl_s = ttl_s
        self._now = now

    @classmethod
    def from_secret_text(cls, secret: str, base_url: str, ttl_s: int) -> "LinkSigner":
        """A signer over `secret` (settings.link_secret), or a random per-process one if empty."""
        if secret:
            register_secret(secret)
            return cls(secret.encode("utf-8"), base_url, ttl_s)
        log.warning("NUCLEUS_RAG_LINK_SECRET is not set: signed document links use a random per-process "
                    "secret and stop working when this process restarts")
        return cls(secrets.token_bytes(32), base_url, ttl_s)

    def derive_key(self, purpose: str) -> bytes:
        """A key of its own for `purpose` (e.g. "cursor"), derived from the link secret by HMAC:
        what it signs never verifies as a link, and the link secret itself signs links only."""
        return hmac.new(self._secret, b"nucleus-derived-key-v1\x00" + purpose.encode("utf-8"), hashlib.sha256).digest()

    def _mac(self, path: str, tenant: str, user: str, groups: Sequence[str], exp: int,
             target: str | None = None) -> str:
        fields: list = [_VERSION, path, tenant, user, sorted(set(groups)), exp]
        if target is not None:
            fields.append(["redirect", target])
        message = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return _b64(hmac.new(self._secret, message, hashlib.sha256).digest())

    def sign_redirect(self, entry_id: str, target: str, tenant_id: str, user_id: str,
                      groups: Sequence[str] = ()) -> str:
        """A link to a federated result (`<source>:<id>`) that redirects to `target` (its own
        http(s) URL) for this user while it may still use the source, valid `ttl_s` seconds."""
        if not target.startswith(("https://", "http://")) or len(target) > 2_048:
            raise ValueError("a redirect target must be an http(s) URL of at most 2048 characters")
        exp = int(self._now()) + self.ttl_s
        path = DOCUMENT_PREFIX + entry_id
        groups = sorted(set(groups))
        query = urlencode({"t": tenant_id, "u": user_id, "g": ",".join(groups), "exp": str(exp), "to": target,
                           "sig": self._mac(path, tenant_id, user_id, groups, exp, target)})
        return f"{self.base_url}{DOCUMENT_PREFIX}{quote(entry_id, safe='')}?{query}"

    def sign(self, entry_id: str, tenant_id: str, user_id: str, groups: Sequence[str] = ()) -> str:
        """A link to `entry_id` for this user, valid for `ttl_s` seconds."""
        exp = int(self._now()) + self.ttl_s
        path = DOCUMENT_PREFIX + entry_id
        groups = sorted(set(groups))
        query = urlencode({"t": tenant_id, "u": user_id, "g": ",".join(groups), "exp": str(exp),
                           "sig": self._mac(path, tenant_id, user_id, groups, exp)})
        return f"{self.base_url}{DOCUMENT_PREFIX}{quote(entry_id, safe='')}?{query}"

    def verify_link(self, url: str, user: str | None = None) -> LinkClaims:
        """The claims of a valid link; raises LinkRejected otherwise. `user`, when given, must be
        the user the link was issued to. Only the path and query are checked (not the host)."""
        if not isinstance(url, str) or len(url) > MAX_LINK_CHARS:
            raise LinkRejected("malformed", "link is not a document link")
        parts = urlsplit(url)
        path = unquote(parts.path)
        if not path.startswith(DOCUMENT_PREFIX) or len(path) == len(DOCUMENT_PREFIX):
            raise LinkRejected("malformed", "link is not a document link")
        try:
            query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query),
                             max_num_fields=len(_REDIRECT_PARAMS) + 1)
        except ValueError:
            raise LinkRejected("malformed", "link query is malformed") from None
        if sorted(query) not in (sorted(_PARAMS), sorted(_REDIRECT_PARAMS)) or any(len(v) != 1 for v in query.values()):
            raise LinkRejected("malformed", "link is missing its signature parameters")
        tenant, link_user, groups_text, exp_text, sig = (query[k][0] for k in _PARAMS)
        target = query["to"][0] if "to" in query else None
        if target is not None and not target.startswith(("https://", "http://")):
            raise LinkRejected("malformed", "link redirect target is not an http(s) URL")
        if not exp_text.isdigit() or len(exp_text) > 12:
            raise LinkRejected("malformed", "link expiry is malformed")
        exp = int(exp_text)
        groups = tuple(g for g in groups_text.split(",") if g)
        expected = self._mac(path, tenant, link_user, groups, exp, target)
        if not hmac.compare_digest(expected.encode("ascii"), sig.encode("ascii", "replace")):
            raise LinkRejected("tampered", "link signature is invalid")
        if exp < int(self._now()):
            raise LinkRejected("expired", "link has expired; ask for a fresh one (verify_document_access)")
        if user is not None and not hmac.compare_digest(user.encode("utf-8"), link_user.encode("utf-8")):
            raise LinkRejected("wrong_user", "link was issued to another user")
        return LinkClaims(entry_id=path[len(DOCUMENT_PREFIX):], tenant_id=tenant, user_id=link_user,
                          groups=groups, expires_unix=exp, target=target or "")
