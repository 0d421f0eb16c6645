"""The topic tools for a verified caller, over the KnowledgeStore's topics (GetTopics).

    rag_topics               clusters of the caller's visible documents: label terms, size,
                             representative documents, date span
    rag_topic_evolution      documents per period (month / quarter / year of created or
                             modified) per topic, or for one topic / a query's topic
    rag_recent_developments  the newest documents of a topic or a query's topic, then ranked by
                             the ordinary 4R search path with recency forced on (recency mode
                             "always"), restricted to those documents; signed links
    rag_topic_map            a 2-D PCA projection of the visible documents with topic ids (JSON),
                             optionally a PNG (base64)

Scope: exactly that of a search (`RagPipeline.scope`: tenant from the credential, the user's
groups enforced by the store, source rules, session tags), and every store call carries an
assertion of the caller so the store applies the same visibility again. A query is embedded
here (LlmOrchestration) and its vector passed to the store. While the tenant's clusters are
being computed the answer is {"status": "computing", "progress"}; ask again.
"""
from __future__ import annotations

import base64
import io
import logging
from dataclasses import replace
from typing import Any

import numpy as np

from services.rag_pipeline.models import Preferences, SearchRequest
from services.rag_pipeline.tools.calls import Call, audit_call
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal, acting_for
from shared.records import SearchFilters

log = logging.getLogger(__name__)

TOOLS = ("rag_topics", "rag_topic_evolution", "rag_recent_developments", "rag_topic_map")
RECENT_POOL = 200          # newest topic members the recency-ranked search runs over
# The profile override of rag_recent_developments: relevancy, recency, richness, reputation,
# recency applied whatever the query says (mode "always").
RECENT_WEIGHTS = (0.4, 0.45, 0.05, 0.1)


class TopicTools:
    """The four topic tools (see the module docstring), over a `RagTools`' collaborators."""

    def __init__(self, rag_tools: Any) -> None:
        self.rag = rag_tools
        self.pipeline = rag_tools.pipeline
        self.ks = rag_tools.ks
        self.llm = rag_tools.llm

    async def _scope(self, who: Principal | None, tenant_id: str):
        """(tenant, filters) a caller's topic request runs under; None filters = nothing visible."""
        if who is None:                           # authentication off: a trusted network
            return tenant_id, SearchFilters()
        tenant = self.pipeline.tenant_for(tenant_id, who)
        scope = await self.pipeline.scope(replace(who, tenant_id=tenant))
        return tenant, None if scope.empty else scope.filters

    async def _embed(self, who: Principal | None, query: str) -> np.ndarray | None:
        if not query:
            return None
        if len(query) > 4_000:
            raise InvalidArgument("query", f"has {len(query)} characters, at most 4000 accepted")
        with acting_for(who):
            return np.asarray(await self.llm.embed([query], purpose="query"), np.float32)[0]

    async def run(self, who: Principal | None, tool: str, *, tenant_id: str = "", k: int = 0, max_terms: int = 8,
                  examples: int = 3, period: str = "month", date_field: str = "created",
                  topic_id: int | None = None, query: str = "", limit: int = 10, max_points: int = 2_000,
                  include_png: bool = False) -> dict[str, Any]:
        """One topic tool call for `who` (None = authentication off); audited."""
        if tool not in TOOLS:
            raise InvalidArgument("tool", f"must be one of {', '.join(TOOLS)}, got {tool!r}")
        call = Call(tool, principal=who)
        try:
            out = await self._run(who, tool, tenant_id=tenant_id, k=k, max_terms=max_terms, examples=examples,
                                  period=period, date_field=date_field, topic_id=topic_id, query=query.strip(),
                                  limit=limit, max_points=max_points, include_png=include_png)
        except Exception as err:
            audit_call(self.rag.audit, call, "deny", f"{type(err).__name__}: {getattr(err, 'message', err)}"[:300])
            raise
        audit_call(self.rag.audit, call, "allow", out.get("status", ""),
                   entries=[d["entry_id"] for d in _listed(out.get("documents")) if "entry_id" in d][:50])
        return out

    async def _run(self, who, tool, *, tenant_id, k, max_terms, examples, period, date_field, topic_id, query,
                   limit, max_points, include_png) -> dict[str, Any]:
        tenant, filters = await self._scope(who, tenant_id)
        if filters is None:
            return {"status": "ready", "documents": 0, "topics": [], "note": "no visible sources"}
        args: dict[str, Any] = {"k": k}
        if tool == "rag_topics":
            kind = "topics"
            args.update(max_terms=max_terms, examples=examples if examples else -1)
        elif tool == "rag_topic_evolution":
            kind = "evolution"
            args.update(period=period, date_field=date_field, topic_id=topic_id,
                        query_vector=await self._embed(who, query))
        elif tool == "rag_topic_map":
            kind = "map"
            args.update(max_points=max_points)
        else:
            kind = "members"
            if not query and (topic_id is None or topic_id < 0):
                raise InvalidArgument("topic_id", "give a topic_id (from rag_topics) or a query")
            args.update(topic_id=topic_id, query_vector=await self._embed(who, query), limit=RECENT_POOL)
        try:
            with acting_for(who):
                out = await self.ks.topics(tenant, filters, kind, **args)
        except NotFound:                 # nothing ingested for this tenant yet
            return {"status": "ready", "documents": 0, "topics": [], "note": "the tenant has no documents yet"}
        if out.get("status") != "ready":
            return out
        if tool == "rag_recent_developments":
            return await self._recent(who, tenant, filters, out, query, limit)
        if tool == "rag_topic_map" and include_png:
            try:
                out["png_base64"] = base64.b64encode(render_map_png(out)).decode("ascii")
            except ImportError:              # a missing optional dependency degrades, with a flag
                out["png_error"] = ("PNG rendering needs matplotlib (pip install matplotlib); "
                                    "the JSON points are complete")
        return out

    async def _recent(self, who: Principal | None, tenant: str, filters, members: dict[str, Any], query: str,
                      limit: int) -> dict[str, Any]:
        docs = members["documents"]
        base = {"status": "ready", "topic_id": members["topic_id"], "label": members["label"],
                "ranking": f"4R with recency forced on (recency mode 'always', weights {RECENT_WEIGHTS}), "
                           f"over the topic's newest {len(docs)} visible documents"}
        if not docs:
            return {**base, "documents": []}
        text = query or " ".join(members["terms"]) or members["label"]
        request = SearchRequest(
            tenant_id=tenant, query=text, top_k_final=min(limit * 3, 100),
            prefs=Preferences(weights=RECENT_WEIGHTS, recency_mode="always", explain=True),
            filters=replace(filters, artifact_ids=tuple(d["artifact_id"] for d in docs)))
        if who is None:
            response = await self.pipeline.search_and_rank(request)
        else:
            response = await self.pipeline.search(request, who)
        seen: set[str] = set()
        out = []
        dates = {d["artifact_id"]: d for d in docs}
        for r in response.results:
            a = r.artifact
            if a.artifact_id in seen:
                continue
            seen.add(a.artifact_id)
            meta = dates.get(a.artifact_id, {})
            link = self.rag.verifier.link(who, r.entry.id) if who is not None else ""
            out.append({"artifact_id": a.artifact_id, "title": a.title or a.file_name, "created": meta.get("created"),
                        "modified": meta.get("modified"), "score": round(r.overall, 4),
                        "recency": round(r.scores[1], 4), "relevancy": round(r.scores[0], 4),
                        "snippet": (r.snippet or r.entry.content_summary)[:300], "entry_id": r.entry.id,
                        "uri": link})
            if len(out) >= limit:
                break
        return {**base, "query": text, "documents": out}


def _listed(value: Any) -> list[dict]:
    return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []


def render_map_png(answer: dict[str, Any], *, title: str = "") -> bytes:
    """A scatter plot of a rag_topic_map answer (matplotlib, Agg), one colour per topic."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {t["topic_id"]: t["label"] for t in answer.get("topics", [])}
    fig, ax = plt.subplots(figsize=(8, 6), dpi=100)
    try:
        cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
        for j, (tid, label) in enumerate(sorted(labels.items())):
            pts = [(p["x"], p["y"]) for p in answer.get("points", []) if p["topic_id"] == tid]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=28, color=cmap(j % cmap.N), label=f"{tid}: {label}"[:60], alpha=0.8)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.set_title(title or f"Topics ({answer.get('documents', 0)} documents, k={answer.get('k', 0)})")
        if labels:
            ax.legend(fontsize=7, loc="best")
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)
