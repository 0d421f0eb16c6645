"""The normalised text hash of an entry: what duplicate folding compares (services/rag_pipeline/merge.py).

Normalisation, in order: Unicode NFKC (compatibility forms folded: ligatures, full-width
letters, non-breaking spaces), case folding (`str.casefold`, so "Straße" = "STRASSE"), then
the text kept as its words only — runs of letters and digits (`[^\\W_]+`), joined by one
space — so punctuation, symbols, underscores and any run of whitespace do not count. The
hash is BLAKE2b (12 bytes) of that, as 24 hex digits; a text without a word hashes to "".

It is derived data: stored beside an entry at ingest (both backends), recomputed from the
stored text where missing, and never part of a row's checksum.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata

_WORDS = re.compile(r"[^\W_]+", re.UNICODE)


def normalised_text(text: str) -> str:
    """The words of `text` after NFKC and case folding, joined by single spaces."""
    return " ".join(_WORDS.findall(unicodedata.normalize("NFKC", text or "").casefold()))


def text_hash(text: str) -> str:
    """The normalised text's hash (24 hex digits); "" for a text without a word."""
    words = normalised_text(text)
    return hashlib.blake2b(words.encode("utf-8"), digest_size=12).hexdigest() if words else ""
