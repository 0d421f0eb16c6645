"""Nucleus to Nucleus without re-embedding: the model fingerprint and the vectors sent with hits.

A remote Nucleus that embeds with the same model as this stack can send its hits' stored
vectors with its answer, and this stack then scores them (dense cosine with its own query
vectors) without embedding a word of them; BM25 is still computed here with the local
tenant's statistics (rescore.py). Both sides must agree, and say so:

    fingerprint   each stack's embedding model, identified by its own output: the unit vectors
                  of PROBE_TEXTS (a few fixed texts), their dimension, and a digest of the vectors
                  rounded to two decimals (shared/model_fingerprint.py). Served by the MCP tool
                  `nucleus_model_fingerprint`.
    probe         this stack asks every source marked `trusted` with `identity: assertion` (a
                  remote Nucleus) for its fingerprint at each probe (probe.py) and compares it
                  with its own: same dimension and every probe vector's cosine >= MATCH_COSINE.
                  A match records the remote's digest in the source's status (`vectors: matched`).
    request       a query to a matched source asks for vectors in the call's `_meta`
                  (VECTORS_META: {"fingerprint": <the remote's digest>}).
    answer        the remote sends them only when the caller is a verified peer stack (its
                  assertion verified: shared/auth/principals.py) and the digest asked for is its
                  own now; only for its own hits, read from its KnowledgeStore with the caller's
                  access checks (GetEntries include_vectors): the vectors of tenant content are
                  tenant data. They travel in the result's `_meta`, float16, base64 (`encode`).
                  With them, each hit's analysed keyword terms as the remote's keyword leg holds
                  them (title and body, shared/analysis.py) and its richness, naming the analyser
                  (ANALYSER_ID): this stack computes BM25 from them with its own tenant's
                  statistics without reading the texts again (rescore.py).
    check         this stack accepts them only with the digest it matched, the dimension it
                  embeds with, at most MAX_VECTORS, finite and non-zero, for hits of the answer
                  (`decode`); anything else is refused whole and the hits are re-scored as today.
                  The terms are used only with the vectors, only when they name this stack's
                  analyser, bounded (MAX_TERMS_CHARS a field) and with richness in [0, 1]
                  (`keyword_facts`); else that hit's text is analysed here as for any remote.

A source that is not trusted, or whose fingerprint does not match, keeps today's re-scoring.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import math
import weakref
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from services.rag_pipeline.federation.hits import RemoteHit
from shared.analysis import ANALYSER_ID
from shared.model_fingerprint import PROBE_TEXTS, probe_digest
from shared.records import AnalysedText, PeerEntries

log = logging.getLogger(__name__)

VECTORS_META = "io.nucleus/vectors"
FINGERPRINT_TOOL = "nucleus_model_fingerprint"
MATCH_COSINE = 0.999          # every probe vector at least this close: the same model (fp noise allowed)
MAX_VECTORS = 50              # at most one per hit a remote may send (rag_get_raw_results top_k <= 50)
MAX_DIMENSION = 4_096
MIN_NORM = 0.5                # a stored unit vector, sent as float16: its norm is ~1
MAX_TERMS_CHARS = 20_000      # a hit's analysed title or body terms (a stored chunk's are ~1-2 KB)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    dimension: int
    digest: str
    probes: np.ndarray        # (len(PROBE_TEXTS), dimension) float32 unit vectors

    @classmethod
    def of(cls, vectors: np.ndarray) -> Fingerprint:
        v, digest = probe_digest(vectors)
        return cls(int(v.shape[1]), digest, v)

    def to_json(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "digest": self.digest, "probe_texts": len(PROBE_TEXTS),
                "probe_vectors": base64.b64encode(self.probes.astype(np.float16).tobytes()).decode("ascii")}

    def compare(self, remote: Any) -> tuple[str, str]:
        """(the remote's digest, "") when its fingerprint (`to_json`) is this model's; else
        ("", why not)."""
        if not isinstance(remote, dict):
            return "", "the fingerprint is not an object"
        dim, digest, data = remote.get("dimension"), remote.get("digest"), remote.get("probe_vectors")
        if dim != self.dimension:
            return "", f"{dim!r}-dimensional vectors, this stack's are {self.dimension}-dimensional"
        if not isinstance(digest, str) or not 0 < len(digest) <= 64 or not isinstance(data, str):
            return "", "the fingerprint has no digest or probe vectors"
        vectors, why = _floats(data, len(PROBE_TEXTS), self.dimension)
        if vectors is None:
            return "", f"probe vectors: {why}"
        cosines = np.sum(vectors * self.probes, axis=1)
        if float(cosines.min()) < MATCH_COSINE:
            return "", f"another embedding model (probe cosine {float(cosines.min()):.3f} < {MATCH_COSINE})"
        return digest, ""


class LocalFingerprint:
    """This stack's fingerprint, computed once by its own LanguageModel (one embed call of the
    probe texts), then kept; a failure is retried at the next use."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._value: Fingerprint | None = None
        self._lock = asyncio.Lock()

    @property
    def value(self) -> Fingerprint | None:
        """The fingerprint if computed already (no model call)."""
        return self._value

    async def get(self, timeout_s: float = 10.0) -> Fingerprint:
        if self._value is None:
            async with self._lock:
                if self._value is None:
                    vectors = await self._llm.embed(list(PROBE_TEXTS), purpose="document", timeout_s=timeout_s)
                    self._value = Fingerprint.of(np.asarray(vectors, np.float32))
        return self._value


_BY_MODEL: "weakref.WeakKeyDictionary[Any, LocalFingerprint]" = weakref.WeakKeyDictionary()


def fingerprint_of(llm: Any) -> LocalFingerprint:
    """The one `LocalFingerprint` of this LanguageModel adapter (the tool that serves it and the
    probe that compares with it share one model call)."""
    found = _BY_MODEL.get(llm)
    if found is None:
        found = _BY_MODEL[llm] = LocalFingerprint(llm)
    return found


# ---------------------------------------------------------------------------- the wire format
def encode(ids: Sequence[str], vectors: Sequence[np.ndarray], digest: str,
           terms: Sequence[tuple[str, str] | None] = (), richness: Sequence[float] = ()) -> dict[str, Any]:
    """The `_meta` entry carrying `vectors` (unit, one per id) with the sender's digest, and, when
    given, each id's analysed (title, body) terms ([] where none) and richness."""
    matrix = np.vstack([np.asarray(v, np.float32) for v in vectors]) if len(vectors) else np.zeros((0, 0))
    out = {"fingerprint": digest, "dimension": int(matrix.shape[1]) if len(vectors) else 0, "dtype": "float16",
           "ids": list(ids), "data": base64.b64encode(matrix.astype(np.float16).tobytes()).decode("ascii")}
    if terms:
        out.update(analyser=ANALYSER_ID, terms=[list(t) if t else [] for t in terms],
                   richness=[round(float(r), 6) for r in richness])
    return out


def encode_entries(entries: PeerEntries, digest: str, dimension: int) -> dict[str, Any] | None:
    """The `_meta` entry for a peer: the entries' stored vectors of `dimension` with their analysed
    terms and richness (`encode`); None when no entry has such a vector."""
    rows = [(h.entry.id, v, t, h.entry.richness) for h, v, t in zip(entries.hits, entries.vectors, entries.terms)
            if v is not None and len(v) == dimension]
    if not rows:
        return None
    ids, vectors, terms, richness = zip(*rows)
    return encode(ids, vectors, digest, terms, richness)


def keyword_facts(meta: Any, vectors: dict[str, bytes]) -> dict[str, AnalysedText]:
    """The analysed terms and richness sent with accepted `vectors` (`decode`), by hit id: only
    with this stack's analyser, bounded, richness in [0, 1]; a malformed entry is left out (that
    hit's text is analysed here), a wrong analyser or shape leaves them all out."""
    payload = meta.get(VECTORS_META) if isinstance(meta, dict) and vectors else None
    if not isinstance(payload, dict) or payload.get("analyser") != ANALYSER_ID:
        return {}
    ids, terms, richness = payload.get("ids"), payload.get("terms"), payload.get("richness")
    if not (isinstance(ids, list) and isinstance(terms, list) and isinstance(richness, list)
            and len(ids) == len(terms) == len(richness)):
        return {}
    out: dict[str, AnalysedText] = {}
    for hit_id, pair, rich in zip(ids, terms, richness):
        if (hit_id in vectors and isinstance(pair, list) and len(pair) == 2
                and all(isinstance(t, str) and len(t) <= MAX_TERMS_CHARS for t in pair)
                and isinstance(rich, (int, float)) and not isinstance(rich, bool) and 0.0 <= rich <= 1.0):
            out[hit_id] = AnalysedText(ANALYSER_ID, pair[0], pair[1], float(rich))
    return out


def decode(meta: Any, digest: str, dimension: int, hit_ids: set[str]) -> tuple[dict[str, bytes], str]:
    """The vectors of a remote's answer by hit id (float32 unit vectors as bytes), or ({}, why
    they were refused). Nothing sent: ({}, "")."""
    payload = meta.get(VECTORS_META) if isinstance(meta, dict) else None
    if payload is None:
        return {}, ""
    if not isinstance(payload, dict):
        return {}, "vectors refused: not an object"
    if payload.get("fingerprint") != digest:
        return {}, "vectors refused: sent for another model fingerprint"
    if payload.get("dtype") != "float16" or payload.get("dimension") != dimension:
        return {}, f"vectors refused: expected float16 of dimension {dimension}"
    ids, data = payload.get("ids"), payload.get("data")
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_VECTORS or not isinstance(data, str):
        return {}, f"vectors refused: 1-{MAX_VECTORS} ids and their data expected"
    if not all(isinstance(i, str) and i in hit_ids for i in ids) or len(set(ids)) != len(ids):
        return {}, "vectors refused: an id is not a hit of the answer (or repeated)"
    vectors, why = _floats(data, len(ids), dimension)
    if vectors is None:
        return {}, f"vectors refused: {why}"
    return {i: v.astype(np.float32).tobytes() for i, v in zip(ids, vectors)}, ""


def _floats(data: str, rows: int, dimension: int) -> tuple[np.ndarray | None, str]:
    """`rows` float16 unit vectors from base64, renormalised; (None, why) when malformed."""
    if not 0 < dimension <= MAX_DIMENSION:
        return None, f"dimension must be 1-{MAX_DIMENSION}"
    expected = rows * dimension * 2
    if len(data) > 4 * math.ceil(expected / 3) + 4:
        return None, f"larger than {rows} x {dimension} float16 values"
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None, "not base64"
    if len(raw) != expected:
        return None, f"{len(raw)} bytes, {rows} x {dimension} float16 values are {expected}"
    v = np.frombuffer(raw, np.float16).astype(np.float32).reshape(rows, dimension)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    if not np.isfinite(v).all() or float(norms.min()) < MIN_NORM:
        return None, "not finite unit vectors"
    return v / norms, ""


def with_vectors(hits: Sequence[RemoteHit], vectors: dict[str, bytes],
                 facts: dict[str, AnalysedText] | None = None) -> list[RemoteHit]:
    """The hits, each with the vector (and analysed terms) sent for it (if any)."""
    facts = facts or {}
    return [replace(h, vector=vectors[h.id], terms=facts.get(h.id)) if h.id in vectors else h for h in hits]


def wanted(meta: Any) -> str:
    """The fingerprint digest an incoming call asks vectors for ("" = none asked)."""
    if meta is not None and not isinstance(meta, dict):
        meta = getattr(meta, "model_extra", None) or {}
    value = meta.get(VECTORS_META) if isinstance(meta, dict) else None
    digest = value.get("fingerprint") if isinstance(value, dict) else None
    return digest if isinstance(digest, str) and 0 < len(digest) <= 64 else ""
