"""Topic answers (JSON-ready dicts) of one caller's view (topic_model.View): the topics with
their labels and representative documents, their evolution over time, a topic's members, the
2-D map; and the checks of a topic request's arguments. topics.py picks the answer.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.topic_model import SEED, View
from shared.errors import InvalidArgument

MAX_K = 50
PERIODS = ("month", "quarter", "year")
DATE_FIELDS = ("created", "modified")


# ---------------------------------------------------------------------------- arguments
def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= MAX_K:
        raise InvalidArgument("k", f"must be an integer from 0 (choose automatically) to {MAX_K}, got {k!r}")
    return k


def check_range(name: str, value: int, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(name, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidArgument(name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


# ---------------------------------------------------------------------------- answers
def _date(created: int, modified: int, date_field: str) -> int:
    if date_field == "modified":
        return modified or created
    return created or modified


def _iso(unix: int) -> str | None:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).date().isoformat() if unix > 0 else None


def period_key(unix: int, period: str) -> str:
    if unix <= 0:
        return "undated"
    d = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
    if period == "year":
        return f"{d.year}"
    if period == "quarter":
        return f"{d.year}-Q{(d.month - 1) // 3 + 1}"
    return f"{d.year}-{d.month:02d}"


def _doc(view: View, i: int, *, similarity: bool = True) -> dict[str, Any]:
    snap = view.model.snapshot
    out: dict[str, Any] = {"artifact_id": snap.artifact_ids[i], "title": snap.titles[i],
                           "created": _iso(int(snap.created[i])), "modified": _iso(int(snap.modified[i]))}
    if similarity:
        out["similarity"] = round(float(view.model.similarity[i]), 4)
    return out


def _header(view: View) -> dict[str, Any]:
    m = view.model
    return {"status": "ready", "k": m.k, "criterion": m.criterion, "documents": int(len(view.visible)),
            "computed_in_s": round(m.seconds, 3)}


def topics_answer(view: View, *, max_terms: int = 8, examples: int = 3) -> dict[str, Any]:
    snap = view.model.snapshot
    topics = []
    for t in sorted(view.labels):
        members = view.members(t)
        order = members[np.argsort(-view.model.similarity[members], kind="stable")]
        dates = [_date(int(snap.created[i]), int(snap.modified[i]), "created") for i in members]
        dated = [d for d in dates if d > 0]
        topics.append({
            "topic_id": t, "label": view.label(t), "size": int(len(members)),
            "terms": [{"term": snap.surface.get(term, term), "stem": term, "weight": round(w, 5)}
                      for term, w in view.labels[t][:max_terms]],
            "date_span": {"from": _iso(min(dated)) if dated else None, "to": _iso(max(dated)) if dated else None},
            "representative_documents": [_doc(view, int(i)) for i in order[:examples]],
        })
    topics.sort(key=lambda x: (-x["size"], x["topic_id"]))
    return {**_header(view), "topics": topics}


def nearest_topic(view: View, query_vector: NDArray[np.float32]) -> int:
    """The topic (among those the caller sees) whose centroid is closest to the query."""
    if not view.labels:
        raise InvalidArgument("query", "no topic is visible to the caller")
    ids = sorted(view.labels)
    sims = view.model.centroids[ids] @ query_vector.reshape(-1)
    return ids[int(np.argmax(sims))]


def _topic_arg(view: View, topic_id: int) -> int:
    if topic_id not in view.labels:
        raise InvalidArgument("topic_id", f"topic {topic_id} does not exist or has no document visible to the "
                                          f"caller; visible topics: {sorted(view.labels)}")
    return topic_id


def evolution_answer(view: View, *, period: str, date_field: str, topic_id: int | None = None,
                     query_vector: NDArray[np.float32] | None = None) -> dict[str, Any]:
    check_choice("period", period, PERIODS)
    check_choice("date_field", date_field, DATE_FIELDS)
    snap = view.model.snapshot
    chosen: list[int]
    how = "all topics"
    if query_vector is not None:
        chosen = [nearest_topic(view, query_vector)]
        how = "the query's topic (nearest centroid)"
    elif topic_id is not None and topic_id >= 0:
        chosen = [_topic_arg(view, topic_id)]
        how = f"topic {topic_id}"
    else:
        chosen = sorted(view.labels)
    periods: set[str] = set()
    rows = []
    for t in chosen:
        counts = Counter(period_key(_date(int(snap.created[i]), int(snap.modified[i]), date_field), period)
                         for i in view.members(t))
        periods |= set(counts)
        rows.append({"topic_id": t, "label": view.label(t), "total": int(sum(counts.values())),
                     "counts": dict(sorted(counts.items()))})
    return {**_header(view), "period": period, "date_field": date_field, "selection": how,
            "periods": sorted(periods), "topics": rows}


def members_answer(view: View, *, topic_id: int | None, query_vector: NDArray[np.float32] | None,
                   limit: int) -> dict[str, Any]:
    """The newest visible members of a topic (by id, or the query's nearest topic)."""
    snap = view.model.snapshot
    if query_vector is not None and (topic_id is None or topic_id < 0):
        t = nearest_topic(view, query_vector)
    elif topic_id is not None and topic_id >= 0:
        t = _topic_arg(view, topic_id)
    else:
        raise InvalidArgument("topic_id", "give a topic_id or a query")
    members = view.members(t)
    newest = sorted(members.tolist(), key=lambda i: (-max(int(snap.created[i]), int(snap.modified[i])),
                                                     snap.artifact_ids[i]))[:limit]
    return {**_header(view), "topic_id": t, "label": view.label(t),
            "terms": [snap.surface.get(term, term) for term, _ in view.labels[t][:8]],
            "documents": [_doc(view, i, similarity=False) for i in newest]}


def map_answer(view: View, *, max_points: int) -> dict[str, Any]:
    m = view.model
    snap = m.snapshot
    visible = view.visible
    if len(visible) > max_points:
        rng = np.random.default_rng(SEED)
        visible = np.sort(rng.choice(visible, max_points, replace=False))
    coords = (snap.vectors[visible] - m.pca_mean) @ m.pca_basis.T if len(visible) else np.zeros((0, 2))
    points = [{"artifact_id": snap.artifact_ids[i], "title": snap.titles[i], "x": round(float(x), 5),
               "y": round(float(y), 5), "topic_id": int(m.assign[i])}
              for i, (x, y) in zip(visible.tolist(), coords.tolist())]
    return {**_header(view), "projection": "PCA (2 components) of the tenant's document vectors",
            "topics": [{"topic_id": t, "label": view.label(t, 3)} for t in sorted(view.labels)],
            "points": points, "sampled": bool(len(visible) < len(view.visible))}
