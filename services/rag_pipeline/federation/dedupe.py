"""De-duplication across sources: one candidate per document, whichever sources returned it.

Two hits are the same document when they share a URL (scheme and host lower-cased, fragment
and trailing slash dropped), a (source, id), the same normalised text (lower-cased, words
only, hashed), or — for the remote hits, whose vectors the re-scoring has anyway — a cosine
above NEAR_DUPLICATE_COSINE. Of a group, the hit from the more reputable source is kept (ties:
the earlier source, then the remote's better rank). A local candidate always wins over a
remote copy of itself: `LocalKeys` holds the local results' keys, and the pipeline drops a
remote result matching one (core.py).
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable, Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from services.rag_pipeline.federation.hits import RemoteHit

NEAR_DUPLICATE_COSINE = 0.98
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)


def text_key(text: str) -> str:
    """The normalised-text hash ("" for a text without words)."""
    words = _WORDS.findall(text.lower())
    return hashlib.blake2b(" ".join(words).encode("utf-8"), digest_size=12).hexdigest() if words else ""


def url_key(url: str) -> str:
    """The URL as a de-duplication key ("" for none or one that does not parse)."""
    url = (url or "").strip()
    if not url:
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if not parts.scheme or not parts.netloc:
        return ""
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))


def dedupe_remote(hits: Sequence[RemoteHit], vectors: np.ndarray | None,
                  reputation: dict[str, float], order: Sequence[str] = ()) -> tuple[list[int], int]:
    """Indices of the hits to keep (one per document, in input order) and how many were dropped."""
    position = {s: i for i, s in enumerate(order)}
    preference = sorted(range(len(hits)), key=lambda i: (-reputation.get(hits[i].source_id, 0.0),
                                                         position.get(hits[i].source_id, len(position)),
                                                         hits[i].rank or 1 << 30, i))
    seen: set[str] = set()
    kept: list[int] = []
    for i in preference:
        h = hits[i]
        keys = [k for k in (f"id:{h.source_id}:{h.id}", _prefixed("url", url_key(h.url)),
                            _prefixed("text", text_key(h.text))) if k]
        if any(k in seen for k in keys):
            continue
        if vectors is not None and kept:
            if float((vectors[kept] @ vectors[i]).max()) > NEAR_DUPLICATE_COSINE:
                continue
        seen.update(keys)
        kept.append(i)
    kept.sort()
    return kept, len(hits) - len(kept)


def _prefixed(kind: str, key: str) -> str:
    return f"{kind}:{key}" if key else ""


class LocalKeys:
    """The keys of local results a remote result must not repeat."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._keys: set[str] = set()
        for text, url in items:
            self.add(text, url)

    def add(self, text: str, url: str) -> None:
        for key in (_prefixed("url", url_key(url)), _prefixed("text", text_key(text))):
            if key:
                self._keys.add(key)

    def repeats(self, text: str, url: str) -> bool:
        return any(k in self._keys for k in (_prefixed("url", url_key(url)), _prefixed("text", text_key(text))) if k)
