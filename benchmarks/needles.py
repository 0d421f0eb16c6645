"""The needle set: generated lookups that exactly one document of a tenant answers.

Agents ask for identifiers (error codes, part numbers, gene names, ticket ids) and quote exact
phrases; a hybrid ranker must put the one document holding them on top even when the embedding
model has never seen the token. Two kinds, drawn from the tenant's own documents:

    token    a word of a document (title or text, surrounding punctuation stripped, at least 4
             characters, a letter among them) that the KnowledgeStore's analyser turns into one
             term held by no other document of the tenant; the query is the word as written
    phrase   a run of PHRASE_WORDS consecutive words of one document's text, with at least 3
             non-stopword terms, whose lower-cased word sequence occurs in no other document;
             the query is the run in double quotes

Generation is deterministic (a seeded `random.Random` over the documents in corpus order) and
looks at nothing but the corpus. A needle is found at k when its document (artifact id) is among
the first k distinct documents of the ranking: `hit@1`, `hit@5`.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from shared.analysis import STOPWORDS, analyse, words

SEED = 20_261_124
PHRASE_WORDS = 5
DEFAULT_TOKENS = 200
DEFAULT_PHRASES = 100
_STRIP = ".,;:!?()[]{}<>\"'“”‘’"


@dataclass(frozen=True, slots=True)
class Needle:
    id: str            # "token-<n>" | "phrase-<n>"
    kind: str          # "token" | "phrase"
    query: str
    doc_id: str        # the one document that holds it


def generate(doc_ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], *,
             tokens: int = DEFAULT_TOKENS, phrases: int = DEFAULT_PHRASES, seed: int = SEED) -> list[Needle]:
    """Up to `tokens` token needles and `phrases` phrase needles for these documents."""
    bodies = [f"{t}\n{x}" if t else x for t, x in zip(titles, texts)]
    df: Counter[str] = Counter()
    for body in bodies:
        df.update(set(analyse(body)))
    rng = random.Random(seed)

    token_pool: list[tuple[str, int]] = []
    seen: set[str] = set()
    for row, body in enumerate(bodies):
        for raw in body.split():
            token = raw.strip(_STRIP)
            if len(token) < 4 or not any(c.isalpha() for c in token) or token.lower() in seen:
                continue
            terms = analyse(token)
            if len(terms) == 1 and df[terms[0]] == 1:
                seen.add(token.lower())
                token_pool.append((token, row))
    chosen = rng.sample(token_pool, min(tokens, len(token_pool)))
    out = [Needle(f"token-{i + 1}", "token", token, doc_ids[row]) for i, (token, row) in enumerate(chosen)]

    normalised = [" " + " ".join(words(body)) + " " for body in bodies]
    rows = list(range(len(bodies)))
    rng.shuffle(rows)
    found = 0
    for row in rows:
        if found >= phrases:
            break
        run = _phrase_in(texts[row], rng)
        if run is None:
            continue
        key = " " + " ".join(words(run)) + " "
        if sum(1 for text in normalised if key in text) != 1:
            continue
        found += 1
        out.append(Needle(f"phrase-{found}", "phrase", f'"{run}"', doc_ids[row]))
    return out


def _phrase_in(text: str, rng: random.Random) -> str | None:
    """A run of PHRASE_WORDS words of `text` with at least 3 non-stopword terms, or None."""
    tokens = [t.strip(_STRIP) for t in text.split()]
    tokens = [t for t in tokens if t]
    if len(tokens) < PHRASE_WORDS:
        return None
    for _ in range(8):
        start = rng.randrange(0, len(tokens) - PHRASE_WORDS + 1)
        run = tokens[start:start + PHRASE_WORDS]
        content = [w for w in words(" ".join(run)) if w not in STOPWORDS]
        if len(content) >= 3 and len(words(" ".join(run))) == PHRASE_WORDS:
            return " ".join(run)
    return None


def hits(ranking: Sequence[str], doc_id: str) -> dict[str, float]:
    """{"hit@1", "hit@5"} of one needle's document ranking (distinct documents, best first)."""
    top = list(dict.fromkeys(ranking))[:5]
    return {"hit@1": float(bool(top) and top[0] == doc_id), "hit@5": float(doc_id in top)}


def summarise(results: dict[str, dict[str, float]], needles: Sequence[Needle]) -> dict[str, dict]:
    """Mean hit@1 / hit@5 per kind and over all needles; `results` maps needle id -> hits."""
    out: dict[str, dict] = {}
    for kind in ("token", "phrase", "all"):
        chosen = [n for n in needles if kind == "all" or n.kind == kind]
        if not chosen:
            continue
        out[kind] = {"needles": len(chosen),
                     **{m: sum(results.get(n.id, {}).get(m, 0.0) for n in chosen) / len(chosen)
                        for m in ("hit@1", "hit@5")}}
    return out
