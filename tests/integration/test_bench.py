"""`nucleus bench` end to end: a tiny BEIR-format dataset written here, run against the suite's
session stack (tests/integration/conftest.py; no stack of its own): the first run's `--stack-dir`
is the session stack's data directory, where the harness finds a healthy stack running and uses
it, the second run names it with `--use-running`. Two tenant slices, the in-process baseline, the
report files; the second run, in the same harness process (the baseline's model loaded once),
finds the ingest done and the embedding cache filled."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.options import BenchOptions
from tests.support.processes import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# 30 documents, each about one thing, with words no other document uses.
TOPICS = [
    ("volcano", "Volcano eruptions", "Basaltic lava and magma chambers feed a volcano eruption; pyroclastic ash follows."),
    ("penguin", "Emperor penguins", "Emperor penguin colonies huddle on Antarctic sea ice through the polar winter."),
    ("espresso", "Espresso brewing", "Espresso extraction forces hot water through finely ground coffee beans at pressure."),
    ("glacier", "Glacier retreat", "Alpine glaciers retreat as meltwater carves moraines and crevasses in the valley."),
    ("violin", "Violin making", "Luthiers carve spruce tops and maple backs; varnish shapes the violin's tone."),
    ("sourdough", "Sourdough bread", "A sourdough starter of wild yeast and lactobacilli leavens rye and wheat loaves."),
    ("tornado", "Tornado formation", "Supercell thunderstorms spin a mesocyclone that can spawn a tornado funnel."),
    ("chess", "Chess openings", "The Sicilian defence and the Ruy Lopez are chess openings played by grandmasters."),
    ("honeybee", "Honeybee hives", "Honeybee workers forage nectar and pollen; the queen lays eggs in wax combs."),
    ("submarine", "Submarine sonar", "A submarine uses sonar pings and ballast tanks to navigate beneath the ocean."),
    ("origami", "Origami folding", "Origami artists fold a single paper square into cranes without cutting or glue."),
    ("cactus", "Desert cactus", "Saguaro cactus stores water in pleated stems and survives the Sonoran desert heat."),
    ("telescope", "Reflecting telescopes", "A reflecting telescope gathers starlight with a parabolic mirror and eyepiece."),
    ("marathon", "Marathon training", "Marathon runners build endurance with long runs, tempo intervals and carb loading."),
    ("tapestry", "Medieval tapestry", "Weavers wove medieval tapestry on looms with wool weft and linen warp threads."),
    ("lighthouse", "Lighthouse keepers", "A lighthouse keeper tended the Fresnel lens and foghorn on the rocky headland."),
    ("mushroom", "Wild mushrooms", "Chanterelle and porcini mushrooms fruit from mycelium networks in forest soil."),
    ("archery", "Archery equipment", "Archers draw a recurve bow, nock arrows with fletching and aim at the bullseye."),
    ("compost", "Garden compost", "Compost heaps of leaves and kitchen scraps are broken down by earthworms and fungi."),
    ("satellite", "Satellite orbits", "A geostationary satellite orbits above the equator relaying telemetry signals."),
    ("kayak", "Sea kayaking", "Sea kayakers paddle along fjords, bracing against swell with a spray deck fitted."),
    ("cheese", "Cheese making", "Cheesemakers curdle milk with rennet, press the curds and age wheels of cheddar."),
    ("glassblowing", "Glassblowing craft", "Glassblowers gather molten glass on a blowpipe and shape it at the furnace."),
    ("earthquake", "Earthquake faults", "Tectonic plates slip along a fault; seismographs record the earthquake tremors."),
    ("falconry", "Falconry", "Falconers train peregrine falcons and hawks to hunt and return to the gauntlet."),
    ("pottery", "Pottery wheel", "Potters throw clay on a wheel, trim the pots and fire them in a kiln with glaze."),
    ("vineyard", "Vineyard harvest", "Vintners harvest grapes from the vineyard, crush them and ferment the must into wine."),
    ("railway", "Steam railways", "Steam locomotives burn coal in the firebox; the boiler drives pistons on the railway."),
    ("coral", "Coral reefs", "Coral polyps build reefs of calcium carbonate; bleaching follows warm ocean water."),
    ("beekeeping", "Quilting", "Quilters stitch patchwork squares with batting between layers of cotton fabric."),
]
QUERIES = {
    "q1": ("how do volcano eruptions and lava form", "volcano"),
    "q2": ("emperor penguin colonies on antarctic ice", "penguin"),
    "q3": ("chess openings sicilian defence", "chess"),
    "q4": ("reflecting telescope parabolic mirror", "telescope"),
    "q5": ("steam locomotive boiler on the railway", "railway"),
}


def write_dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w") as f:
        for doc_id, title, text in TOPICS:
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w") as f:
        for qid, (text, _) in QUERIES.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
        f.write(json.dumps({"_id": "unjudged", "text": "a query nobody judged"}) + "\n")
    with (root / "qrels" / "test.tsv").open("w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, (_, doc_id) in QUERIES.items():
            f.write(f"{qid}\t{doc_id}\t1\n")
    return root


RUN_BENCH = ("import io, pickle, sys\n"
             "from rich.console import Console\n"
             "from benchmarks.harness import run_bench\n"
             "runs = pickle.loads(open(sys.argv[1], 'rb').read())\n"
             "results = [run_bench(options, Console(file=io.StringIO(), width=120)) for options in runs]\n"
             "open(sys.argv[2], 'wb').write(pickle.dumps(results))\n")


def bench(runs: list[BenchOptions], work: Path) -> list[dict]:
    """`run_bench(options)` for each of `runs`, one after the other in one process of its own, their
    result dicts returned. The harness runs asyncio loops of its own with gRPC clients; in the pytest
    process they would share gRPC's completion queue with the suite's loop (tests/support/processes.py
    `run_cli` says why not)."""
    (work / "options.pickle").write_bytes(pickle.dumps(runs))
    done = subprocess.run([sys.executable, "-c", RUN_BENCH, str(work / "options.pickle"), str(work / "result.pickle")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return pickle.loads((work / "result.pickle").read_bytes())


@pytest.fixture(scope="module")
def bench_runs(tmp_path_factory, stack_data_dir, stack):
    """Both runs against the session stack: the first (found running in its --stack-dir) ingests and
    fills the embedding cache, the second (--use-running, fewer phases) must skip the ingest and read
    the cache."""
    tmp = tmp_path_factory.mktemp("bench")
    dataset = write_dataset(tmp / "tiny")
    first = BenchOptions(
        datasets=[dataset], tenants=["tiny"], tenant_slices=2, cache_dir=tmp / "cache", stack_dir=stack_data_dir,
        out_dir=tmp / "out", concurrency=(1, 4), throughput_queries=3, warmup=1, needle_tokens=12, needle_phrases=6,
        top_k_initial=50, top_k_final=10)
    second = BenchOptions(
        datasets=first.datasets, tenants=first.tenants, tenant_slices=2, cache_dir=first.cache_dir,
        use_running=True, running_data_dir=stack_data_dir, out_dir=tmp / "out2", concurrency=(1,),
        throughput_queries=1, warmup=0, dense_weights=(0.5,), plots=False, needle_tokens=0, needle_phrases=0,
        completion_queries=0, top_k_initial=50, top_k_final=10)
    return list(zip(bench([first, second], tmp), (first, second)))


@pytest.fixture(scope="module")
def bench_result(bench_runs):
    return bench_runs[0]


def test_the_harness_writes_json_markdown_queries_and_plots(bench_result):
    result, options = bench_result
    for name in ("result.json", "report.md", "queries.jsonl", "latency_stages.png", "quality.png",
                 "throughput.png"):
        path = options.out_dir / name
        assert path.is_file() and path.stat().st_size > 0, name
    stored = json.loads((options.out_dir / "result.json").read_text())
    assert stored["quality"].keys() == result["quality"].keys()
    assert "## Tenant isolation" in (options.out_dir / "report.md").read_text()


def test_quality_is_high_on_the_easy_set_for_ours_and_the_baseline(bench_result):
    result, _ = bench_result
    assert set(result["quality"]) == {"tiny-s1of2", "tiny-s2of2"}
    for tenant, per_method in result["quality"].items():
        for method in ("default", "default-folded", "rrf", "keyword-only"):
            q = per_method[method]
            assert q["errors"] == 0, (tenant, method)
            assert q["ndcg@10"] > 0.5, (tenant, method, q)
            assert 0.0 <= q["recall@100"] <= 1.0 and 0.0 <= q["mrr@10"] <= 1.0
        assert result["baseline"]["tenants"][tenant]["quality"]["ndcg@10"] > 0.5
        assert result["ratios"]["quality"][tenant]["default"]["ndcg@10"] > 0


def test_no_tenant_sees_the_other_tenants_documents(bench_result):
    result, _ = bench_result
    iso = result["isolation"]
    assert iso["tenants"] == 2
    assert iso["responses_checked"] > 0 and iso["results_checked"] > 0
    assert iso["violations"] == 0 and iso["foreign_results"] == 0, iso["examples"]


def test_latency_throughput_and_ingest_figures_are_reported(bench_result):
    result, _ = bench_result
    stages = result["latency"]["stages"]
    assert {"embed", "retrieve", "rank", "total"} <= set(stages)
    assert result["latency"]["e2e_client"]["p50"] > 0
    assert [t["clients"] for t in result["throughput"]] == [1, 4]
    for t in result["throughput"]:
        assert t["completed"] + t["errors"] == t["clients"] * 3
        assert t["errors"] == 0 and t["qps"] > 0
    ingest = {i["tenant"]: i for i in result["ingest"]}
    assert ingest["tiny-s1of2"]["documents"] == 15 and ingest["tiny-s1of2"]["tenant_artifacts"] == 15
    assert all(i["docs_per_s"] and i["docs_per_s"] > 0 for i in ingest.values())
    assert result["baseline"]["latency_all"]["total"]["p50"] > 0


def test_a_second_run_skips_the_ingest_and_reuses_the_embedding_cache(bench_runs):
    (first_result, _), (result, options) = bench_runs
    assert options.cache_dir == bench_runs[0][1].cache_dir and (options.out_dir / "result.json").is_file()
    for r in (first_result, result):                                  # each used the session stack, started none
        assert not r["stack"]["started_here"] and r["stack"]["data_dir"] == str(options.running_data_dir.resolve())
    assert not first_result["ingest"][0]["skipped"] and first_result["ingest"][0]["ingested_now"] > 0
    for i in result["ingest"]:
        assert i["ingested_now"] == 0 and i["skipped"] == i["documents"] and not i["measured_now"]
    assert all(c["from_cache"] for c in result["baseline"]["embedding_cache"].values())
    assert not any(c["from_cache"] for c in first_result["baseline"]["embedding_cache"].values())
    assert result["isolation"]["violations"] == 0


def test_needles_calibration_completion_cost_and_targets_are_reported(bench_result):
    result, options = bench_result
    checks = result["ranking_checks"]
    for tenant in ("tiny-s1of2", "tiny-s2of2"):
        r = checks["tenants"][tenant]
        assert r["needles"]["all"]["needles"] > 0
        assert r["needles"]["token"]["hit@5"] == 1.0                       # one-document words, looked up
        assert 0.0 <= r["baseline_needles"]["all"]["hit@5"] <= 1.0
        assert set(r["split"]) >= {"default", "baseline"} and set(r["split"]["default"]) == {"all"}   # no split file
        cal = r["calibration"]["all"]["probability"]
        assert cal["pairs"] > 0 and 0.0 <= cal["ece"] <= 1.0
        assert sum(row["pairs"] for row in cal["table"]) == cal["pairs"]
    cost = checks["completion_cost"]
    assert cost["queries"] > 0 and cost["ms"]["completed call"]["p50"] > 0
    names = {(t["tenant"], t["target"]) for t in checks["targets"]}
    assert ("tiny-s1of2", "needle hit@5 (default)") in names
    assert "## Ranking checks" in (options.out_dir / "report.md").read_text()
