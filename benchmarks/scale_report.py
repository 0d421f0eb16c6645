"""The scale benchmark's output (scale.py): the Markdown table of the big tenants and the PNG
curves written with `--out`."""
from __future__ import annotations

from pathlib import Path


def table(result: dict) -> str:
    lines = ["| chunks | vectors | index (M, efC, efS) | recall@10 | FAISS p50 | vector leg p50 / p99 (in-proc) | "
             "BM25 p50 | keyword leg p50 / p99 (in-proc) | gRPC vector p50 / p99 | gRPC keyword p50 / p99 | "
             "start→SERVING | first query | KS RSS | write rows/s | index build |",
             "|" + "---|" * 15]
    for r in result["big"]:
        g = r.get("grpc", {})
        i, p = r["index"], r["inprocess"]
        lines.append(
            f"| {r['chunks']:,} | {r.get('vectors', 'isotropic')} | {r['index_kind']}"
            + (f" ({r['hnsw_m']}, {r['hnsw_ef_construction']}, {r['hnsw_ef_search']})" if r["index_kind"] == "hnsw"
               else "")
            + f" | {i['recall_at_10']:.3f} | {i['faiss_p50_ms']} ms | "
            f"{p['vector_p50_ms']} / {p['vector_p99_ms']} ms | {i['bm25_p50_ms']} ms | "
            f"{p['keyword_p50_ms']} / {p['keyword_p99_ms']} ms | "
            f"{g.get('vector_p50_ms', '–')} / {g.get('vector_p99_ms', '–')} ms | "
            f"{g.get('keyword_p50_ms', '–')} / {g.get('keyword_p99_ms', '–')} ms | "
            f"{g.get('start_to_serving_s', '–')} s | {g.get('first_query_s', '–')} s | "
            f"{g.get('rss_mb', '–')} MB | "
            f"{r['write']['rows_per_s']:,} | {r['write'].get('index_build_s', '–')} s |")
    return "\n".join(lines)


def plots(result: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    big = result["big"]
    if big:
        sizes = [r["chunks"] for r in big]
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for key, label in (("vector_p50_ms", "vector leg p50"), ("keyword_p50_ms", "keyword leg p50")):
            ax[0].plot(sizes, [r["inprocess"][key] for r in big], marker="o", label=label + " (in-process)")
            if all("grpc" in r for r in big):
                ax[0].plot(sizes, [r["grpc"][key] for r in big], marker="s", linestyle="--", label=label + " (gRPC)")
        ax[0].set_xscale("log")
        ax[0].set_xlabel("chunks in the tenant")
        ax[0].set_ylabel("ms")
        ax[0].legend(fontsize=8)
        ax[0].set_title("leg latency, top 50")
        ax[1].plot(sizes, [r.get("grpc", {}).get("rss_mb", r["inprocess_rss_delta_mb"]) for r in big], marker="o",
                   label="KnowledgeStore resident MB")
        ax[1].plot(sizes, [r["estimated_mb"] for r in big], marker="s", label="estimated (budget accounting)")
        ax[1].set_xscale("log")
        ax[1].set_xlabel("chunks in the tenant")
        ax[1].legend(fontsize=8)
        ax[1].set_title("memory")
        fig.tight_layout()
        path = out / "scale_big_tenants.png"
        fig.savefig(path, dpi=110)
        written.append(str(path))
    swept = [r for r in big if r.get("ef_sweep")]
    if swept:
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for r in swept:
            efs = [e["ef_search"] for e in r["ef_sweep"]]
            ax[0].plot(efs, [e["recall_at_10"] for e in r["ef_sweep"]], marker="o", label=f"{r['chunks']:,} chunks")
            ax[1].plot(efs, [e["faiss_p50_ms"] for e in r["ef_sweep"]], marker="o", label=f"{r['chunks']:,} chunks")
        ax[0].axhline(0.95, color="grey", linestyle=":", linewidth=1)
        for a, label in ((ax[0], "recall@10 vs exact"), (ax[1], "HNSW search p50, ms")):
            a.set_xscale("log", base=2)
            a.set_xlabel("efSearch")
            a.set_title(label)
            a.legend(fontsize=8)
        fig.suptitle(f"HNSW M {swept[0]['hnsw_m']}, efConstruction {swept[0]['hnsw_ef_construction']}, "
                     f"{swept[0]['vectors']} vectors", fontsize=9)
        fig.tight_layout()
        path = out / f"scale_hnsw_recall_{swept[0]['vectors']}.png"
        fig.savefig(path, dpi=110)
        written.append(str(path))
    small = result.get("small")
    if small and small["runs"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for run in small["runs"]:
            xs, ys = zip(*run["rss_curve"])
            ax.plot(xs, ys, marker=".", label=f"budget {run['budget_mb']} MB")
        ax.set_xlabel("tenants opened")
        ax.set_ylabel("KnowledgeStore resident MB")
        ax.set_title(f"{small['tenants']:,} tenants × {small['chunks_each']:,} chunks")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "scale_small_tenants.png"
        fig.savefig(path, dpi=110)
        written.append(str(path))
    return written
