"""The synthetic tenants of the scale benchmark (scale.py): SciFact sentences analysed once
(Corpus), vectors clustered around the real MiniLM vectors with a `span` or `isotropic`
perturbation (SpanBasis, synthetic_vectors), and whole tenants written straight through the
store's storage layer (write_tenant). The generator is described in scale.py's docstring."""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import numpy as np

DATA = Path("../shared/data/scifact")      # the SciFact folder; `--dataset` of benchmarks.scale sets it
CACHE = Path(".bench-cache")
SCALE_CACHE = CACHE / "scale"
CORPUS_VECTORS = CACHE / "scifact_minilm.npy"
QUERY_VECTORS = CACHE / "scifact_minilm_queries.npy"
DIM = 384
CHUNKS_PER_ARTIFACT = 10
BLEND = 0.35
NOISE = 0.03
SEED = 15
TOP_K = 50          # candidates per leg, as the pipeline asks (agent-sized default)
SPAN_COMPONENTS = 384      # principal directions of the real vectors the span perturbation uses
VECTOR_GENERATORS = ("span", "isotropic")


def describe_generator(vectors: str, components: int = SPAN_COMPONENTS) -> str:
    """The generator and its parameters, as every run prints them."""
    if vectors == "span":
        noise = (f"e = Σ_j z_j·c·σ_j·u_j over the top {components} principal directions u_j (std σ_j) of the "
                 f"real vectors, z_j ~ N(0,1), E|e|² = {NOISE}²·{DIM}")
    else:
        noise = f"e ~ N(0, {NOISE}²·I) (isotropic, all {DIM} dimensions)"
    return (f"chunks of 2 consecutive + 2 random SciFact sentences; vectors ({vectors}): the 5,183 real "
            f"MiniLM document vectors, then normalise(v[a] + {BLEND}·v[b] + e), {noise}; "
            f"{CHUNKS_PER_ARTIFACT} chunks per artifact; seed {SEED}")


def _imports() -> None:
    """The store's modules, imported on first use (module names below are these globals)."""
    global storage, analyse, IndexConfig, ArtifactMeta, KnowledgeStoreSettings
    from services.knowledge_store.embedded import storage
    from services.knowledge_store.embedded.vector_index import IndexConfig
    from shared.analysis import analyse
    from shared.records import ArtifactMeta
    from shared.settings import KnowledgeStoreSettings


def judged_query_ids() -> list[str]:
    """SciFact's judged test queries, sorted by id as strings (the rows of QUERY_VECTORS)."""
    return sorted({line.split("\t")[0] for line in (DATA / "qrels" / "test.tsv").read_text().splitlines()[1:]})


def build_vectors() -> None:
    """CORPUS_VECTORS and QUERY_VECTORS from the bundled model (~3 min on 2 cores, once):
    the corpus through the baseline's embedding cache, the judged queries in id order."""
    from benchmarks.baseline import EmbeddingCache, encode, load_model
    from benchmarks.beir import load_dataset

    print(f"encoding {DATA} once into {CACHE} (corpus and judged queries)", flush=True)
    dataset, model = load_dataset(DATA), load_model()
    vectors, _ = EmbeddingCache(CACHE).corpus_vectors(dataset, model)
    if not CORPUS_VECTORS.exists():
        np.save(CORPUS_VECTORS, vectors)
    np.save(QUERY_VECTORS, encode(model, [dataset.queries[q] for q in judged_query_ids()]))


class Corpus:
    """SciFact split into sentences, each analysed once; the real vectors and queries."""

    def __init__(self) -> None:
        _imports()
        if not CORPUS_VECTORS.exists() or not QUERY_VECTORS.exists():
            build_vectors()
        docs = [json.loads(line) for line in (DATA / "corpus.jsonl").open(encoding="utf-8") if line.strip()]
        self.titles = [d["title"] for d in docs]
        self.title_terms = [" ".join(analyse(t)) for t in self.titles]
        self.sentences: list[list[str]] = []
        self.sentence_terms: list[list[str]] = []
        for d in docs:
            parts = [s for s in re.split(r"(?<=[.!?])\s+", d["text"].strip()) if s] or [d["title"]]
            self.sentences.append(parts)
            self.sentence_terms.append([" ".join(analyse(s)) for s in parts])
        self.vectors = np.load(CORPUS_VECTORS).astype(np.float32)
        if len(self.vectors) != len(docs):
            raise SystemExit(f"{CORPUS_VECTORS} holds {len(self.vectors)} vectors for {len(docs)} documents")
        self.query_vectors = np.load(QUERY_VECTORS).astype(np.float32)
        queries = {q["_id"]: q["text"] for q in map(json.loads, (DATA / "queries.jsonl").open(encoding="utf-8"))}
        self.query_texts = [queries[q] for q in judged_query_ids()]

    def chunk(self, rng: np.random.Generator, a: int) -> tuple[str, str, str]:
        """(text, analysed title, analysed body) of one synthetic chunk from document `a`."""
        sents, terms = self.sentences[a], self.sentence_terms[a]
        i = int(rng.integers(0, max(1, len(sents) - 1)))
        picks = [(a, i), (a, min(i + 1, len(sents) - 1))]
        for _ in range(2):
            b = int(rng.integers(0, len(self.sentences)))
            picks.append((b, int(rng.integers(0, len(self.sentences[b])))))
        text = " ".join(self.sentences[d][j] for d, j in picks)
        body = " ".join(self.sentence_terms[d][j] for d, j in picks)
        return text, self.title_terms[a], body


class SpanBasis:
    """The top `components` principal directions of `real` (rows = unit vectors) and the scale
    of each, so that `noise` draws perturbations with the real vectors' spectrum (per-direction
    variance ∝ σ_j²) and expected energy E|e|² = `energy`."""

    def __init__(self, real: np.ndarray, components: int = SPAN_COMPONENTS,
                 energy: float = NOISE ** 2 * DIM) -> None:
        real = np.asarray(real, np.float64)
        if not 1 <= components <= min(real.shape):
            raise ValueError(f"components must be between 1 and {min(real.shape)}, got {components}")
        _, s, vt = np.linalg.svd(real - real.mean(axis=0), full_matrices=False)
        sigma = s[:components] / math.sqrt(max(len(real) - 1, 1))
        self.directions = vt[:components].astype(np.float32)            # (k, d), orthonormal rows
        self.sigma = sigma                                              # real std along each
        self.scales = (sigma * math.sqrt(energy / float((sigma ** 2).sum()))).astype(np.float32)

    def noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        z = rng.standard_normal((n, len(self.scales))).astype(np.float32)
        return (z * self.scales) @ self.directions


def synthetic_vectors(corpus: Corpus, rng: np.random.Generator, docs: np.ndarray, start: int,
                      basis: SpanBasis | None = None) -> np.ndarray:
    """Vectors of chunks `start..` from documents `docs` (module docstring): the span generator
    with `basis`, else the isotropic one."""
    n_real = len(corpus.vectors)
    out = np.empty((len(docs), DIM), np.float32)
    for row, (pos, a) in enumerate(zip(range(start, start + len(docs)), docs)):
        if pos < n_real:
            out[row] = corpus.vectors[pos]
            continue
        b = int(rng.integers(0, n_real))
        noise = basis.noise(rng, 1)[0] if basis is not None else rng.normal(0, NOISE, DIM).astype(np.float32)
        out[row] = corpus.vectors[a] + BLEND * corpus.vectors[b] + noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def write_tenant(data_dir: Path, tenant: str, chunks: int, corpus: Corpus, *, seed: int,
                 index_kind: str = "auto", basis: SpanBasis | None = None) -> dict:
    """Write `chunks` synthetic chunks into the tenant's SQLite (storage layer, bulk
    transactions). Returns the write figures."""
    rng = np.random.default_rng(seed)
    directory = data_dir / "tenants" / storage.db.tenant_dir_name(tenant)
    db = storage.db.TenantDB(directory, tenant, DIM, IndexConfig(kind=index_kind, hnsw_ef_search=128).to_json())
    started = time.perf_counter()
    n_real = len(corpus.vectors)
    written = 0
    try:
        per_tx = 2_000
        artifacts = math.ceil(chunks / CHUNKS_PER_ARTIFACT)
        for first in range(0, artifacts, per_tx):
            with db.write("bulk load") as conn:
                for art in range(first, min(first + per_tx, artifacts)):
                    n = min(CHUNKS_PER_ARTIFACT, chunks - written)
                    a = written % n_real if written < n_real else int(rng.integers(0, n_real))
                    docs = np.asarray([(written + j) % n_real if written + j < n_real else a for j in range(n)])
                    rows, ts = [], 1_500_000_000 + int(rng.integers(0, 200_000_000))
                    for j, d in enumerate(docs):
                        text, title_terms, body_terms = corpus.chunk(rng, int(d))
                        rows.append(storage.entries.EntryRow(
                            chunk_index=j, text=text, headline=corpus.titles[int(d)], content_summary="",
                            timestamp_unix=ts, richness=0.5, fts_title=title_terms, fts_body=body_terms))
                    meta = ArtifactMeta(artifact_id=f"a{art}", title=corpus.titles[int(docs[0])],
                                        source_type="synthetic", source_id="scale", tags=(f"t{art % 10}",),
                                        created_unix=ts, modified_unix=ts)
                    storage.entries.replace_artifact(conn, meta, "", ts, rows,
                                                     synthetic_vectors(corpus, rng, docs, written, basis))
                    written += n
                conn.execute("COMMIT")
    finally:
        db.close()
    seconds = time.perf_counter() - started
    return {"chunks": written, "write_s": round(seconds, 1), "rows_per_s": round(written / seconds)}


# -- measurement helpers ---------------------------------------------------------------------

def settings(data_dir: Path, **overrides):
    return KnowledgeStoreSettings(data_dir=data_dir, **overrides)


class NoEmbedder:
    """The stores here are only searched (vectors come with the queries)."""

    async def embed(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the scale benchmark does not embed")
