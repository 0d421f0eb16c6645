"""The Topics page's data: the tenant's topic map (rag_topic_map) as the caller sees it, laid out
for a server-rendered SVG, and one topic's members.

    topic_map(topics, principal, tenant, topic)   {"status", "points", "topics", "members", ...}

Points are placed in a fixed viewBox (WIDTH x HEIGHT) from the map's PCA coordinates; each carries
its document's title and id for the hover (the SVG <title> and data attributes read by
static/topics.js), and its topic for the colour class (t0..t9) and the click. The answer is the
store's, filtered by the caller's scope (TopicTools: tenant, groups, source rules), never another's.
"""
from __future__ import annotations

from typing import Any

from shared.identity import Principal

WIDTH, HEIGHT, PAD = 720.0, 420.0, 14.0
COLOURS = 10
MAX_POINTS = 2_000


def _scale(values: list[float], size: float) -> list[float]:
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    span = hi - lo or 1.0
    return [round(PAD + (v - lo) / span * (size - 2 * PAD), 1) for v in values]


async def topic_map(topics: Any, principal: Principal, tenant: str, topic: int | None) -> dict[str, Any]:
    answer = await topics.run(principal, "rag_topic_map", tenant_id=tenant, max_points=MAX_POINTS)
    if answer.get("status") != "ready":
        return {"status": answer.get("status", "computing"), "progress": answer.get("progress"), "points": [],
                "topics": [], "members": [], "note": answer.get("note", "")}
    raw = [p for p in answer.get("points", []) if isinstance(p, dict)]
    xs = _scale([float(p["x"]) for p in raw], WIDTH)
    ys = _scale([-float(p["y"]) for p in raw], HEIGHT)           # SVG's y grows downwards
    sizes: dict[int, int] = {}
    points = []
    for p, x, y in zip(raw, xs, ys):
        tid = int(p["topic_id"])
        sizes[tid] = sizes.get(tid, 0) + 1
        points.append({"x": x, "y": y, "topic": tid, "colour": tid % COLOURS, "title": str(p.get("title") or ""),
                       "artifact_id": str(p.get("artifact_id", "")), "chosen": tid == topic})
    listed = [{"topic_id": int(t["topic_id"]), "label": str(t.get("label", "")), "colour": int(t["topic_id"]) % COLOURS,
               "size": sizes.get(int(t["topic_id"]), 0)} for t in answer.get("topics", [])]
    members = sorted((p for p in points if p["chosen"]), key=lambda p: (p["title"].lower(), p["artifact_id"]))
    chosen = next((t for t in listed if t["topic_id"] == topic), None)
    return {"status": "ready", "points": points, "topics": listed, "members": members, "chosen": chosen,
            "documents": answer.get("documents", len(points)), "sampled": bool(answer.get("sampled")),
            "projection": answer.get("projection", ""), "note": answer.get("note", ""),
            "width": WIDTH, "height": HEIGHT}


__all__ = ["topic_map", "WIDTH", "HEIGHT"]
