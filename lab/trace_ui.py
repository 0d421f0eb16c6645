"""A local OTLP trace UI without Docker: Arize Phoenix from PyPI, in its own virtualenv, with a
Nucleus stack exporting to it, checked once with a query's connected trace.

    python -m lab.trace_ui [--venv .trace-ui-venv] [--port 6006] [--data-dir D] [--keep]

1. The virtualenv (default `.trace-ui-venv` at the repository root) is made once with
   `python3.11 -m venv` (else `python3`) and `pip install arize-phoenix==PHOENIX_VERSION`; a stamp
   file inside it records the version, so later runs skip the install. The product's `.venv` is
   never touched: Phoenix's dependencies live only in that virtualenv.
2. Phoenix serves on 127.0.0.1:<port> (UI, GraphQL, REST and OTLP/HTTP at /v1/traces), its
   OTLP/gRPC receiver on a free port, its SQLite database under `<data dir>/phoenix`, the web
   analytics pixels off.
3. A stack (`nucleus up --detach --ephemeral-ports`, data under `<data dir>/stack`) exports its
   spans to Phoenix over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT; metrics export off, Phoenix
   takes traces only), into the Phoenix project `nucleus` (resource attribute
   `openinference.project.name`). Two small documents are ingested over gRPC, then one
   SearchAndRank runs over gRPC under a root span of this command (`trace_ui.check`, exported
   to Phoenix as well), so the trace id is known and the trace has one real root.
4. The trace's spans are read back from Phoenix's REST API
   (GET /v1/projects/nucleus/spans/otlpv1?trace_id=...) until the trace is whole. Phoenix keeps
   no resource attributes, so each span's service.name is looked up by span id in the local
   trace files the services wrote (`<stack dir>/traces/<service>.jsonl`). Connected: every span
   carries the trace id, exactly one span (this command's) has no parent, every other span's
   parent is among the trace's spans, all three services have spans in it, and the UI's own
   query (GraphQL getTraceByOtelId) sees the same trace: project, span count, root. Exit 0 only then.
5. The stack (`nucleus down`) and Phoenix (by pid) are stopped, unless --keep: both stay up and
   the commands that stop them are printed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHOENIX_VERSION = "20.26.1"
STAMP = ".nucleus-trace-ui.stamp"
PROJECT = "nucleus"
TENANT = "trace-ui"
QUERY = "quokkaflux resonator calibration steps"
SERVICES = ("nucleus-rag-pipeline", "nucleus-knowledge-store", "nucleus-llm-orchestration")
CHECK_SERVICE = "nucleus-trace-ui"
SERVICE_FILES = {"rag_pipeline": "nucleus-rag-pipeline", "knowledge_store": "nucleus-knowledge-store",
                 "llm_orchestration": "nucleus-llm-orchestration"}


# ------------------------------------------------------------------------------------ arguments
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.trace_ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".trace-ui-venv",
                        help="Phoenix's own virtualenv, made once (default: %(default)s)")
    parser.add_argument("--port", type=int, default=6006, help="Phoenix's HTTP port on 127.0.0.1 (UI and OTLP)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="Phoenix's database and the stack's data (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true",
                        help="leave Phoenix and the stack running (prints how to stop them)")
    parser.add_argument("--mode", choices=("single", "split"), default=None,
                        help="the stack's deployment mode (default: the `nucleus up` default)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the whole trace to show in Phoenix")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        build_parser().error(f"--port must be 1-65535, got {args.port}")
    return args


# ------------------------------------------------------------------------- the connected check
@dataclass
class Verdict:
    connected: bool
    spans_per_service: dict[str, int]
    problems: list[str] = field(default_factory=list)
    root: str = ""


def check_connected(spans: Iterable[Mapping], trace_id: str, services: Sequence[str] = SERVICES) -> Verdict:
    """Whether `spans` (dicts with trace_id, span_id, parent_span_id, name, service) form one
    connected trace `trace_id` with spans of every one of `services`."""
    spans = list(spans)
    problems: list[str] = []
    per_service = Counter(s.get("service") or "?" for s in spans)
    if not spans:
        return Verdict(False, {}, ["no spans"])
    other = [s for s in spans if s.get("trace_id") != trace_id]
    if other:
        problems.append(f"{len(other)} span(s) of another trace")
    ids = [s.get("span_id") for s in spans]
    if len(set(ids)) != len(ids):
        problems.append("duplicate span ids")
    known = set(ids)
    roots = [s for s in spans if not s.get("parent_span_id")]
    if len(roots) != 1:
        problems.append(f"{len(roots)} root spans (want 1): {sorted(s.get('name', '') for s in roots)}")
    orphans = [s for s in spans if s.get("parent_span_id") and s["parent_span_id"] not in known]
    if orphans:
        problems.append("parent not in the trace: " + ", ".join(
            sorted(f"{s.get('service') or '?'}:{s.get('name')}" for s in orphans)))
    if len(roots) == 1 and not orphans:          # every span reachable from the root (no cycles)
        children: dict[str, list[str]] = {}
        for s in spans:
            if s.get("parent_span_id"):
                children.setdefault(s["parent_span_id"], []).append(s["span_id"])
        seen, todo = set(), [roots[0]["span_id"]]
        while todo:
            sid = todo.pop()
            if sid not in seen:
                seen.add(sid)
                todo.extend(children.get(sid, []))
        if seen != known:
            problems.append(f"{len(known - seen)} span(s) not reachable from the root")
    missing = [name for name in services if not per_service.get(name)]
    if missing:
        problems.append("no spans of " + ", ".join(missing))
    root = f"{roots[0].get('service') or '?'}:{roots[0].get('name')}" if len(roots) == 1 else ""
    return Verdict(not problems, dict(sorted(per_service.items())), problems, root)


def _any_value(value: Mapping) -> object:
    for key in ("string_value", "int_value", "bool_value", "double_value"):
        if key in value and value[key] is not None:
            return value[key]
    return None


def phoenix_spans(payload: Mapping, services_by_span: Mapping[str, str]) -> list[dict]:
    """Phoenix's OTLP-style span list (spans/otlpv1) as flat dicts, each with its service.name
    from `services_by_span` (span id -> service; Phoenix stores no resource attributes)."""
    spans = []
    for s in payload.get("data") or []:
        attributes = {a["key"]: _any_value(a.get("value") or {}) for a in s.get("attributes") or []}
        spans.append({"trace_id": s.get("trace_id"), "span_id": s.get("span_id"),
                      "parent_span_id": s.get("parent_span_id") or None, "name": s.get("name"),
                      "service": services_by_span.get(s.get("span_id"), "?"), "attributes": attributes})
    return spans


def local_services(trace_dir: Path, trace_id: str) -> dict[str, str]:
    """span id -> service.name for trace `trace_id`, from the services' own trace files."""
    found: dict[str, str] = {}
    for path in sorted(trace_dir.glob("*.jsonl")):
        if path.name.endswith(".metrics.jsonl"):
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if trace_id not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("trace_id") == trace_id:
                found[record["span_id"]] = record.get("service") or SERVICE_FILES.get(path.stem, path.stem)
    return found


# ---------------------------------------------------------------------------- the virtualenv
def _base_python() -> str:
    return shutil.which("python3.11") or shutil.which("python3") or sys.executable


def ensure_venv(venv: Path, version: str = PHOENIX_VERSION) -> float | None:
    """Make the virtualenv and install Phoenix once; seconds it took, None when it was there."""
    venv = venv.resolve()
    stamp = venv / STAMP
    product_venv = Path(sys.prefix).resolve()
    if venv == product_venv or venv == (ROOT / ".venv").resolve():
        raise SystemExit(f"refusing to install Phoenix into the product's virtualenv {venv}")
    if stamp.exists() and stamp.read_text().strip() == version and (venv / "bin" / "phoenix").exists():
        return None
    started = time.monotonic()
    if not (venv / "bin" / "python").exists():
        print(f"creating {venv} ({_base_python()} -m venv)", flush=True)
        subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True)
    print(f"installing arize-phoenix=={version} into {venv} (once; a few minutes, ~850 MB)", flush=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    f"arize-phoenix=={version}"], check=True)
    stamp.write_text(version + "\n")
    return time.monotonic() - started


# -------------------------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def phoenix_env(port: int, grpc_port: int, working_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "OTEL_"))}
    env.update(PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(grpc_port),
               PHOENIX_WORKING_DIR=str(working_dir), PHOENIX_TELEMETRY_ENABLED="false",
               PHOENIX_ALLOW_EXTERNAL_RESOURCES="false", PHOENIX_DB_LOGGING_LEVEL="warning")
    return env


def start_phoenix(venv: Path, port: int, working_dir: Path) -> subprocess.Popen:
    working_dir.mkdir(parents=True, exist_ok=True)
    log = open(working_dir / "phoenix.log", "ab")
    try:
        return subprocess.Popen([str(venv.resolve() / "bin" / "phoenix"), "serve"],
                                env=phoenix_env(port, free_port(), working_dir), cwd=str(working_dir),
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Phoenix exited with {proc.returncode} before answering")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"Phoenix not answering at {url} after {timeout_s:.0f}s")


def stack_env(phoenix_url: str, stack_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=phoenix_url, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
               OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="none", OTEL_BSP_SCHEDULE_DELAY="200",
               OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}",
               NUCLEUS_DATA_DIR=str(stack_dir), HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    return env


def nucleus(stack_dir: Path, env: Mapping[str, str], *words: str) -> subprocess.CompletedProcess:
    log = stack_dir / "nucleus-cli.log"
    stack_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(stack_dir), *words],
                              env=dict(env), cwd=str(ROOT), stdout=out, stderr=out, stdin=subprocess.DEVNULL)


# ------------------------------------------------------------------------------ the query
def _documents():
    from shared.records import ArtifactMeta, DocumentIn

    texts = [("Quokkaflux resonator calibration", "Calibrate the quokkaflux resonator in three steps: warm it "
              "up for ten minutes, zero the gauge, then tune the flux dial until the lamp is green."),
             ("Resonator safety", "Never open the resonator housing while the coil is charged. Discharge it "
              "with the grounding rod first and wear insulated gloves.")]
    return [DocumentIn(artifact=ArtifactMeta(artifact_id=f"trace-ui-{i}", title=title, source_type="wiki",
                                             source_id="wiki", modified_unix=1_760_000_000),
                       content=f"# {title}\n\n{body}\n", content_type="text/markdown")
            for i, (title, body) in enumerate(texts)]


async def traced_query(services: Mapping[str, Mapping], phoenix_url: str) -> tuple[str, int]:
    """Ingest the documents, then one SearchAndRank under this command's root span (exported
    to Phoenix); returns the trace id and the number of results."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from benchmarks.queries import Method, RagClient
    from services.knowledge_store.client import KnowledgeStoreClient

    ks = KnowledgeStoreClient(services["knowledge_store"]["grpc"], ingest_timeout_s=300)
    try:
        await ks.ingest(TENANT, "", _documents())
    finally:
        await ks.close()
    provider = TracerProvider(resource=Resource.create({"service.name": CHECK_SERVICE,
                                                        "openinference.project.name": PROJECT}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix_url}/v1/traces")))
    tracer = provider.get_tracer("lab.trace_ui")
    client = RagClient(services["rag_pipeline"]["grpc"], top_k_initial=10, top_k_final=3, timeout_s=60)
    try:
        with tracer.start_as_current_span("trace_ui.check", kind=trace.SpanKind.CLIENT) as root:
            root.set_attribute("nucleus.query", QUERY)
            # The gRPC client interceptor (no SDK in this process) sends this span as the parent.
            token = otel_context.attach(trace.set_span_in_context(root))
            try:
                record = await client.search(TENANT, Method("default"), "q1", QUERY)
            finally:
                otel_context.detach(token)
            trace_id = format(root.get_span_context().trace_id, "032x")
    finally:
        await client.close()
        provider.shutdown()
    if record.error:
        raise RuntimeError(f"SearchAndRank failed: {record.error}")
    return trace_id, len(record.doc_ids)


def fetch_trace(phoenix_url: str, trace_id: str, trace_dir: Path,
                timeout_s: float) -> tuple[list[dict], Verdict, dict | None]:
    """Poll Phoenix until the trace is connected and its UI agrees (ingestion is asynchronous)
    or `timeout_s`: the spans (REST), the verdict and the UI's view (GraphQL)."""
    import httpx

    url = f"{phoenix_url}/v1/projects/{PROJECT}/spans/otlpv1"
    deadline = time.monotonic() + timeout_s
    spans: list[dict] = []
    ui: dict | None = None
    verdict = Verdict(False, {}, ["no answer from Phoenix"])
    while True:
        try:
            reply = httpx.get(url, params={"trace_id": trace_id, "limit": 1000}, timeout=10.0)
            if reply.status_code == 200:
                by_span = {**local_services(trace_dir, trace_id)}
                payload = reply.json()
                for s in payload.get("data") or []:
                    if not s.get("parent_span_id"):
                        by_span.setdefault(s["span_id"], CHECK_SERVICE)
                spans = phoenix_spans(payload, by_span)
                verdict = check_connected(spans, trace_id)
                if verdict.connected:
                    ui = ui_view(phoenix_url, trace_id)
                    verdict.problems += ui_agrees(ui, spans, verdict)
                    verdict.connected = not verdict.problems
            else:
                verdict = Verdict(False, {}, [f"Phoenix answered {reply.status_code}: {reply.text[:200]}"])
        except httpx.HTTPError as err:
            verdict = Verdict(False, {}, [f"Phoenix: {err}"])
        if verdict.connected or time.monotonic() > deadline:
            return spans, verdict, ui
        time.sleep(1.0)


UI_QUERY = ("query($t: String!) { getTraceByOtelId(traceId: $t) "
            "{ traceId numSpans project { name } rootSpan { name } } }")


def ui_view(phoenix_url: str, trace_id: str) -> dict | None:
    """The trace as Phoenix's UI loads it (GraphQL getTraceByOtelId); None if it has none,
    {"errors": [...]} when GraphQL answered errors."""
    import httpx

    reply = httpx.post(f"{phoenix_url}/graphql", json={"query": UI_QUERY, "variables": {"t": trace_id}},
                       timeout=10.0)
    reply.raise_for_status()
    body = reply.json()
    if body.get("errors"):
        return {"errors": [e.get("message", str(e)) for e in body["errors"]]}
    return (body.get("data") or {}).get("getTraceByOtelId")


def ui_agrees(ui: Mapping | None, spans: Sequence[Mapping], verdict: Verdict) -> list[str]:
    """What the UI's view of the trace disagrees on with the spans checked (empty: nothing)."""
    if ui is None:
        return ["the UI (GraphQL) does not know the trace"]
    if ui.get("errors"):
        return ["the UI (GraphQL) answered: " + "; ".join(ui["errors"])[:200]]
    problems = []
    if ui.get("numSpans") != len(spans):
        problems.append(f"the UI counts {ui.get('numSpans')} spans, the REST API {len(spans)}")
    if (ui.get("project") or {}).get("name") != PROJECT:
        problems.append(f"the UI files the trace under project {(ui.get('project') or {}).get('name')!r}")
    root = (ui.get("rootSpan") or {}).get("name")
    if verdict.root and root != verdict.root.split(":", 1)[1]:
        problems.append(f"the UI's root span is {root!r}")
    return problems


# ------------------------------------------------------------------------------------- main
def stop_pid(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def trace_url(url: str, trace_id: str) -> str:
    """Phoenix's UI route that opens a trace by its OpenTelemetry id."""
    return f"{url}/redirects/traces/{trace_id}"


def _fit(names: Sequence[str], width: int) -> str:
    """`names` joined by ", ", as many as fit in `width` characters, then how many more."""
    shown: list[str] = []
    for i, name in enumerate(names):
        rest = len(names) - i - 1
        tail = f", … (+{rest})" if rest else ""
        if len(", ".join([*shown, name]) + tail) > width:
            return ", ".join(shown) + f", … (+{len(names) - len(shown)})" if shown else f"… ({len(names)})"
        shown.append(name)
    return ", ".join(shown)


def report(url: str, trace_id: str, spans: list[dict], verdict: Verdict, ui: Mapping | None = None) -> None:
    print(f"Phoenix:   {url}/  (project {PROJECT!r})")
    print(f"trace id:  {trace_id}")
    print(f"the trace: {trace_url(url, trace_id)}")
    print(f"spans:     {len(spans)} in Phoenix; root {verdict.root or '-'}")
    for service, n in verdict.spans_per_service.items():
        names = sorted({s["name"] for s in spans if s["service"] == service})
        print(f"  {service:<27} {n:>3}  {_fit(names, 120 - 34)}")
    if ui and not ui.get("errors"):
        print(f"UI view:   GraphQL getTraceByOtelId: project {ui['project']['name']!r}, {ui['numSpans']} spans, "
              f"root {(ui.get('rootSpan') or {}).get('name')!r}")
    print(f"connected: {'yes' if verdict.connected else 'no'}")
    for problem in verdict.problems:
        print(f"  - {problem}")


def run(args: argparse.Namespace) -> int:
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="nucleus-trace-ui-"))).resolve()
    stack_dir = data_dir / "stack"
    url = f"http://127.0.0.1:{args.port}"
    t0 = time.monotonic()
    seconds = ensure_venv(args.venv)
    print(f"virtualenv: {args.venv} (arize-phoenix {PHOENIX_VERSION}; "
          + (f"installed in {seconds:.0f}s)" if seconds is not None else "already installed)"), flush=True)
    if port_in_use(args.port):
        print(f"port {args.port} is taken on 127.0.0.1 (another Phoenix?); pick another with --port", file=sys.stderr)
        return 2
    phoenix = start_phoenix(args.venv, args.port, data_dir / "phoenix")
    stack_up = False
    keep = connected = False
    try:
        t = time.monotonic()
        wait_http(f"{url}/healthz", phoenix)
        print(f"Phoenix up at {url}/ in {time.monotonic() - t:.1f}s (pid {phoenix.pid}; log "
              f"{data_dir / 'phoenix' / 'phoenix.log'})", flush=True)
        env = stack_env(url, stack_dir)
        t = time.monotonic()
        up = ["up", "--detach", "--ephemeral-ports", *(["--mode", args.mode] if args.mode else [])]
        stack_up = True
        if nucleus(stack_dir, env, *up).returncode != 0:
            raise RuntimeError(f"the stack did not start; see {stack_dir / 'nucleus-cli.log'} and "
                               f"{stack_dir / 'run'}")
        state = json.loads((stack_dir / "run" / "stack.json").read_text())
        print(f"stack up ({state.get('mode')} mode) in {time.monotonic() - t:.1f}s, exporting to {url}/v1/traces",
              flush=True)
        trace_id, results = asyncio.run(traced_query(state["services"], url))
        print(f"SearchAndRank: {results} result(s)", flush=True)
        spans, verdict, ui = fetch_trace(url, trace_id, stack_dir / "traces", args.timeout)
        report(url, trace_id, spans, verdict, ui)
        print(f"total {time.monotonic() - t0:.1f}s")
        keep, connected = args.keep, verdict.connected
        return 0 if connected else 1
    finally:
        if keep:
            print(f"left running: Phoenix at {url}/ (pid {phoenix.pid}) and the stack ({stack_dir}). Stop them with:")
            print(f"  nucleus --data-dir {stack_dir} down")
            print(f"  kill {phoenix.pid}")
        else:
            if stack_up:
                nucleus(stack_dir, env, "down")
            stop_pid(phoenix)
            if connected and args.data_dir is None:
                shutil.rmtree(data_dir, ignore_errors=True)
                print("stopped the stack and Phoenix; removed their temporary data")
            else:
                print(f"stopped the stack and Phoenix; data and logs in {data_dir}")


def main(argv: Sequence[str] | None = None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
