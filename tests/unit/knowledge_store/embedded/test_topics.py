"""Topics of a tenant (services/knowledge_store/topics.py, embedded backend): planted themes are recovered,
evolution counts equal a direct count, and labels only ever come from visible documents."""
from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections import Counter

import numpy as np
import pytest

from services.knowledge_store import topics as topics_mod
from shared.analysis import analyse
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import InvalidArgument
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

THEMES = {
    "ocean": "coral reef ocean tide marine plankton whale kelp lagoon seabed".split(),
    "space": "galaxy orbit telescope nebula comet asteroid planet rocket astronaut".split(),
    "kitchen": "recipe flour oven butter dough baking pastry simmer spice".split(),
}
FILLER = "report notes overview summary general update".split()
CANARY = "zyxquorbium"


def _text(rng: random.Random, theme: str) -> str:
    vocab = THEMES[theme]
    return " ".join(rng.choice(vocab) if rng.random() < 0.8 else rng.choice(FILLER) for _ in range(60))


def _unix(year: int, month: int) -> int:
    return int(dt.datetime(year, month, 15, tzinfo=dt.timezone.utc).timestamp())


def planted(n_per_theme: int = 8, seed: int = 7):
    """Documents of three themes, dated across 2023-2024; returns (docs, theme by id, date by id)."""
    rng = random.Random(seed)
    docs, theme_of, date_of = [], {}, {}
    for t, theme in enumerate(THEMES):
        for i in range(n_per_theme):
            aid = f"{theme}-{i}"
            created = _unix(2023 + (i % 2), 1 + (i * 5 + t) % 12)
            docs.append(doc(aid, _text(rng, theme), title=f"{theme} note {i}", created_unix=created,
                            source_id="notes"))
            theme_of[aid], date_of[aid] = theme, created
    return docs, theme_of, date_of


@pytest.fixture
def ks(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    yield store
    store.close()


def run(coro):
    return asyncio.run(coro)


async def _ready(store, tenant, filters, kind, **kw):
    for _ in range(200):
        out = await store.topics(tenant, filters, kind, **kw)
        if out["status"] == "ready":
            return out
        await asyncio.sleep(0.05)
    raise AssertionError("topics never became ready")


def test_planted_themes_are_recovered_with_their_terms_and_members(ks):
    docs, theme_of, _ = planted()

    async def go():
        await ks.ingest("t1", "", docs)
        return await _ready(ks, "t1", SearchFilters(), "topics", k=0, examples=20)
    out = run(go())
    assert out["k"] == 3, out["criterion"]
    assert "silhouette" in out["criterion"]
    assert sorted(t["size"] for t in out["topics"]) == [8, 8, 8]
    for topic in out["topics"]:
        members = {d["artifact_id"] for d in topic["representative_documents"]}
        themes = {theme_of[a] for a in members}
        assert len(themes) == 1, (topic["label"], members)          # membership: one theme per topic
        theme = themes.pop()
        stems = {term["stem"] for term in topic["terms"][:5]}
        planted_stems = set(analyse(" ".join(THEMES[theme])))
        assert stems <= planted_stems, (theme, stems)               # labels: that theme's own words
        assert topic["date_span"]["from"] and topic["date_span"]["to"]


def test_given_k_is_used_and_bad_arguments_name_the_field(ks):
    docs, _, _ = planted(4)

    async def go():
        await ks.ingest("t1", "", docs)
        out = await _ready(ks, "t1", SearchFilters(), "topics", k=2)
        assert out["k"] == 2 and "requested" in out["criterion"]
        for kwargs, field in (({"k": 99}, "k"), ({"k": 0, "max_terms": 0}, "max_terms"),
                              ({"period": "week"}, "period")):
            kind = "evolution" if "period" in kwargs else "topics"
            with pytest.raises(InvalidArgument) as err:
                await ks.topics("t1", SearchFilters(), kind, **kwargs)
            assert err.value.field == field
        with pytest.raises(InvalidArgument) as err:
            await ks.topics("t1", SearchFilters(), "evolution", k=2, topic_id=40)
        assert err.value.field == "topic_id"
    run(go())


def test_evolution_counts_equal_a_direct_count(ks):
    docs, theme_of, date_of = planted()

    async def go():
        await ks.ingest("t1", "", docs)
        listing = await _ready(ks, "t1", SearchFilters(), "topics", k=3, examples=20)
        evo = await _ready(ks, "t1", SearchFilters(), "evolution", k=3, period="quarter")
        return listing, evo
    listing, evo = run(go())
    topic_theme = {t["topic_id"]: theme_of[t["representative_documents"][0]["artifact_id"]]
                   for t in listing["topics"]}
    for row in evo["topics"]:
        theme = topic_theme[row["topic_id"]]
        expected = Counter(topics_mod.period_key(date_of[a], "quarter") for a, th in theme_of.items() if th == theme)
        assert row["counts"] == dict(expected)
        assert row["total"] == 8
    # the same by year, computed independently of period_key
    evo_year = run(_ready(ks, "t1", SearchFilters(), "evolution", k=3, period="year"))
    years = Counter(str(dt.datetime.fromtimestamp(d, dt.timezone.utc).year) for d in date_of.values())
    merged = Counter()
    for row in evo_year["topics"]:
        merged.update(row["counts"])
    assert merged == years


def test_query_topic_and_newest_members(ks):
    docs, theme_of, date_of = planted()
    embedder = HashEmbedder()

    async def go():
        await ks.ingest("t1", "", docs)
        q = (await embedder.embed(["telescope comet orbit"]))[0]
        evo = await _ready(ks, "t1", SearchFilters(), "evolution", k=3, query_vector=q, period="year")
        members = await _ready(ks, "t1", SearchFilters(), "members", k=3, query_vector=q, limit=3)
        return evo, members
    evo, members = run(go())
    assert len(evo["topics"]) == 1 and evo["topics"][0]["total"] == 8
    ids = [d["artifact_id"] for d in members["documents"]]
    assert {theme_of[a] for a in ids} == {"space"}
    space = sorted((a for a, t in theme_of.items() if t == "space"), key=lambda a: (-date_of[a], a))
    assert ids == space[:3]


def test_hidden_documents_never_reach_labels_sizes_or_maps(ks):
    docs, _, _ = planted()
    rng = random.Random(3)
    hidden = [doc(f"secret-{i}", f"{CANARY} " * 20 + _text(rng, "ocean"), title=f"secret {CANARY} {i}",
                  visibility_groups=("board",), source_id="notes") for i in range(4)]

    async def go():
        await ks.ingest("t1", "", docs + hidden)
        public = SearchFilters(enforce_visibility=True, visibility_groups=("staff",))
        board = SearchFilters(enforce_visibility=True, visibility_groups=("board",))
        return [await _ready(ks, "t1", f, kind, k=3, max_terms=20, examples=20)
                for f in (public, board) for kind in ("topics", "map")]
    pub_topics, pub_map, board_topics, board_map = run(go())
    canary_stem = analyse(CANARY)[0]
    assert all(canary_stem not in {t["stem"] for t in topic["terms"]} for topic in pub_topics["topics"])
    assert CANARY not in repr(pub_topics) and CANARY not in repr(pub_map)
    assert sum(t["size"] for t in pub_topics["topics"]) == 24
    assert len(pub_map["points"]) == 24
    # the board sees its documents, and the canary labels their topic
    assert sum(t["size"] for t in board_topics["topics"]) == 28
    assert any(canary_stem in {t["stem"] for t in topic["terms"]} for topic in board_topics["topics"])
    assert len(board_map["points"]) == 28


def test_tenants_are_apart_and_a_write_invalidates_the_cache(ks):
    docs, _, _ = planted(4)

    async def go():
        await ks.ingest("t1", "", docs)
        await ks.ingest("t2", "", [doc("other-1", "lonely document about tax forms " * 5, title="tax"),
                                   doc("other-2", "another tax filing deadline note " * 5, title="tax 2")])
        one = await _ready(ks, "t2", SearchFilters(), "topics", k=0)
        await ks.ingest("t2", "", [doc("other-3", "tax refund " * 10, title="tax 3")])
        two = await _ready(ks, "t2", SearchFilters(), "topics", k=0)
        return one, two
    one, two = run(go())
    assert one["documents"] == 2 and two["documents"] == 3
    assert sum(t["size"] for t in two["topics"]) == 3


def test_a_slow_computation_answers_with_a_status(tmp_path):
    docs, _, _ = planted(4)
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    store._topics.wait_s = 0.0
    try:
        async def go():
            await store.ingest("t1", "", docs)
            first = await store.topics("t1", SearchFilters(), "topics", k=2)
            final = await _ready(store, "t1", SearchFilters(), "topics", k=2)
            return first, final
        first, final = run(go())
    finally:
        store.close()
    assert first["status"] == "computing" and 0.0 <= first["progress"] <= 1.0
    assert final["status"] == "ready"


def test_silhouette_prefers_the_true_partition():
    rng = np.random.default_rng(0)
    centers = np.eye(3, 16, dtype=np.float32)
    x = np.concatenate([c + 0.05 * rng.standard_normal((10, 16)).astype(np.float32) for c in centers])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    truth = np.repeat(np.arange(3), 10)
    wrong = np.arange(30) % 3
    assert topics_mod.silhouette(x, truth, 3) > 0.8 > topics_mod.silhouette(x, wrong, 3)


def _naive_silhouette(x, assign):
    n = len(x)
    out = []
    for i in range(n):
        dist = [1.0 - float(np.dot(x[i], x[j])) for j in range(n)]
        own = [dist[j] for j in range(n) if assign[j] == assign[i] and j != i]
        if not own:
            out.append(0.0)
            continue
        a = sum(own) / len(own)
        b = min(np.mean([dist[j] for j in range(n) if assign[j] == c])
                for c in set(assign.tolist()) if c != assign[i])
        out.append((b - a) / max(a, b))
    return float(np.mean(out))


def test_silhouette_equals_a_naive_loop_on_random_inputs():
    rng = np.random.default_rng(5)
    for _ in range(5):
        x = rng.standard_normal((25, 8)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        assign = rng.integers(0, 4, 25)
        assign[:4] = np.arange(4)                   # every cluster present
        k = 4
        assert topics_mod.silhouette(x, assign, k) == pytest.approx(_naive_silhouette(x, assign), abs=1e-5)


def _naive_labels(snap, model, visible_ids):
    """c-TF-IDF of the visible members' Counters, one loop per topic and term."""
    import math
    visible = [i for i, a in enumerate(snap.artifact_ids) if a in visible_ids]
    per_topic: dict[int, Counter] = {}
    doc_freq: dict[int, Counter] = {}
    members: Counter = Counter()
    for i in visible:
        t = int(model.assign[i])
        members[t] += 1
        row = {snap.vocabulary[int(snap.term_ids[j])]: snap.term_counts[j]
               for j in range(snap.term_ptr[i], snap.term_ptr[i + 1])}
        per_topic.setdefault(t, Counter()).update(row)
        doc_freq.setdefault(t, Counter()).update(row.keys())
    for t in per_topic:
        per_topic[t] = Counter({w: c for w, c in per_topic[t].items()
                                if (members[t] < 3 or doc_freq[t][w] >= 2) and not (len(w) < 2 or w.isdigit())})
    topics = sorted(per_topic)
    total = Counter()
    for t in topics:
        total.update(per_topic[t])
    avg = sum(sum(per_topic[t].values()) for t in topics) / len(topics)
    out = {}
    for t in topics:
        size = sum(per_topic[t].values())
        scored = [(w, c / size * math.log(1 + avg / total[w])) for w, c in per_topic[t].items()]
        scored.sort(key=lambda x: (-x[1], x[0]))
        out[t] = scored[:topics_mod.MAX_TERMS]
    return out


def test_labels_equal_a_naive_c_tf_idf_on_random_corpora(tmp_path):
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(30)] + ["7", "x"]
    docs = [doc(f"d{i}", " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 40))), title=f"doc {i}",
                visibility_groups=("g",) if i % 4 == 0 else ()) for i in range(30)]
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        async def go():
            await store.ingest("t1", "", docs)
            await _ready(store, "t1", SearchFilters(), "topics", k=4)
        run(go())
        model = store._topics._state["t1"].models[4]
        snap = model.snapshot
        everyone = set(snap.artifact_ids)
        for visible in (everyone, {a for a in everyone if int(a[1:]) % 4 != 0}):
            view = topics_mod.make_view(model, visible)
            naive = _naive_labels(snap, model, visible)
            assert sorted(view.labels) == sorted(naive)
            for t, expected in naive.items():
                got = view.labels[t]
                assert [w for w, _ in got] == [w for w, _ in expected]
                assert [s for _, s in got] == pytest.approx([s for _, s in expected])
    finally:
        store.close()
