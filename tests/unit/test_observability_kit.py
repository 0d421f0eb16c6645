"""The observability kit (deploy/observability/) checked with the real tools: promtool (rules,
rule unit tests, scrape configs, every dashboard expression parsed) and amtool (the Alertmanager
config). A missing binary fails: scripts/bootstrap.sh installs them (Debian packages
prometheus and prometheus-alertmanager). Also: every alert has a runbook section in
docs/OPERATIONS.md and a promtool case where it fires and one where it stays quiet; no
expression fakes a value with a constant (`vector(...)`, `absent(...)`)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.observability import (ALERTS_FILE, DASHBOARDS, KIT, RECORDING_FILE, RULE_TESTS, alert_rules,
                                         dashboard_exprs, dashboard_panels, doc_anchors, rule_exprs)

GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}
CONSTANT_FALLBACK = re.compile(r"\bvector\s*\(|\babsent(_over_time)?\s*\(")


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run scripts/bootstrap.sh (Debian packages prometheus, prometheus-alertmanager)"
    return path


def _run(*argv: str, cwd: Path | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(argv)} failed ({result.returncode}):\n{output}"
    return output


def test_promtool_checks_the_rule_files():
    output = _run(_tool("promtool"), "check", "rules", str(RECORDING_FILE), str(ALERTS_FILE))
    assert output.count("SUCCESS") == 2


def _minutes(duration: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([mh])", duration).groups()
    return int(number) * (60 if unit == "h" else 1)


def test_promtool_unit_tests_of_the_rules_pass(tmp_path):
    """Every test case of every file, in two promtool processes at once: promtool evaluates a case
    minute by minute up to its last eval_time on one core, and the 400 m SLO cases dominate. The
    cases are dealt (costliest first) to the lighter half; each half has one file per source file
    (its rule files and evaluation interval, its cases)."""
    files = sorted(RULE_TESTS.glob("*.yml"))
    assert files
    cases = []
    for path in files:
        spec = yaml.safe_load(path.read_text())
        for case in spec["tests"]:
            checks = (case.get("alert_rule_test") or []) + (case.get("promql_expr_test") or [])
            cases.append((max(_minutes(c["eval_time"]) for c in checks), path, spec, case))
    halves: list[dict[Path, list]] = [{}, {}]
    cost = [0, 0]
    for minutes, path, _, case in sorted(cases, key=lambda c: -c[0]):
        lighter = cost.index(min(cost))
        cost[lighter] += minutes
        halves[lighter].setdefault(path, []).append(case)
    runs = []
    for i, half in enumerate(halves):
        written = []
        for path, its_cases in half.items():
            spec = yaml.safe_load(path.read_text())
            spec["rule_files"] = [str((path.parent / f).resolve()) for f in spec["rule_files"]]
            spec["tests"] = its_cases
            copy = tmp_path / f"{i}-{path.name}"
            copy.write_text(yaml.safe_dump(spec, sort_keys=False))
            written.append(str(copy))
        runs.append((written, subprocess.Popen([_tool("promtool"), "test", "rules", *written], text=True,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    assert sum(len(c) for half in halves for c in half.values()) == len(cases)
    for written, proc in runs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"promtool test rules {written} failed ({proc.returncode}):\n{output}"
        assert output.count("SUCCESS") == len(written), output


@pytest.mark.parametrize("mode", ["single", "split"])
def test_promtool_checks_the_scrape_config(mode, tmp_path):
    """The shipped config, with its credentials file and rule files pointed at real files
    (promtool checks that both exist)."""
    shipped = KIT / "prometheus" / f"prometheus-{mode}.yml"
    config = yaml.safe_load(shipped.read_text())
    assert config["global"]["scrape_interval"] == "15s"
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == "nucleus"]
    assert jobs, "no scrape job named nucleus"
    services = {group["labels"]["service"] for job in jobs for group in job["static_configs"]}
    assert services == {"knowledge_store", "llm_orchestration", "rag_pipeline"}
    assert all(job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"] for job in jobs)
    assert {Path(p).name for p in config["rule_files"]} == {RECORDING_FILE.name, ALERTS_FILE.name}
    assert all((shipped.parent / p).is_file() for p in config["rule_files"])
    assert config["alerting"]["alertmanagers"]
    supervisor = [job for job in config["scrape_configs"] if job["job_name"] == "nucleus-supervisor"]
    assert [g["labels"]["service"] for job in supervisor for g in job["static_configs"]] == ["supervisor"]
    token = tmp_path / "metrics-scrape.token"
    token.write_text("test-token\n")
    for job in config["scrape_configs"]:
        job["authorization"]["credentials_file"] = str(token)
    config["rule_files"] = [str((shipped.parent / p).resolve()) for p in config["rule_files"]]
    copy = tmp_path / f"prometheus-{mode}.yml"
    copy.write_text(yaml.safe_dump(config))
    output = _run(_tool("promtool"), "check", "config", str(copy))
    assert "SUCCESS" in output


def test_amtool_checks_the_alertmanager_config():
    _run(_tool("amtool"), "check-config", str(KIT / "alertmanager" / "alertmanager.yml"))


def test_every_alert_has_severity_summary_and_a_runbook_section():
    anchors = doc_anchors()
    alerts = alert_rules()
    assert len(alerts) >= 13
    for rule in alerts:
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        annotations = rule["annotations"]
        assert annotations.get("summary") and annotations.get("description"), rule["alert"]
        url = annotations["runbook_url"]
        doc, _, anchor = url.partition("#")
        assert doc == "docs/OPERATIONS.md" and anchor, f"{rule['alert']}: runbook_url {url}"
        assert anchor in anchors, f"{rule['alert']}: no heading for #{anchor} in docs/OPERATIONS.md"


def test_every_alert_has_a_promtool_case_where_it_fires_and_one_where_it_stays_quiet():
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS.glob("*.yml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test") or []:
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - fires == set(), f"alerts never tested firing: {sorted(names - fires)}"
    assert names - quiet == set(), f"alerts never tested quiet: {sorted(names - quiet)}"
    assert (fires | quiet) - names == set(), f"tests of alerts that do not exist: {sorted((fires | quiet) - names)}"


def test_dashboards_are_valid_and_provisioned():
    files = sorted(DASHBOARDS.glob("*.json"))
    assert {p.name for p in files} >= {"nucleus-overview.json", "nucleus-search-stages.json", "nucleus-knowledge-store.json",
                                       "nucleus-llm.json", "nucleus-federation.json"}
    uids = set()
    for path in files:
        board = json.loads(path.read_text())
        assert board.get("uid") and board.get("title"), path.name
        assert board["uid"] not in uids, f"{path.name}: uid {board['uid']} used twice"
        uids.add(board["uid"])
        panels = [p for p in dashboard_panels(path) if p.get("type") != "row"]
        assert panels, path.name
        for panel in panels:
            assert panel.get("targets") and all(t.get("expr") for t in panel["targets"]), f"{path.name}: {panel.get('title')}"
    search = json.loads((DASHBOARDS / "nucleus-search-stages.json").read_text())
    assert any(t.get("exemplar") and "rag.search_and_rank" in t["expr"]
               for p in dashboard_panels(DASHBOARDS / "nucleus-search-stages.json") for t in p.get("targets", [])), \
        "no exemplars on the SearchAndRank panel"
    assert search["uid"] == "nucleus-search-stages"
    sources = yaml.safe_load((KIT / "grafana" / "provisioning" / "datasources" / "datasources.yml").read_text())
    by_uid = {d["uid"]: d for d in sources["datasources"]}
    destinations = by_uid["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert any(d["name"] == "trace_id" and d["datasourceUid"] in by_uid for d in destinations)
    providers = yaml.safe_load((KIT / "grafana" / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    assert providers["providers"][0]["type"] == "file"


def test_no_expression_fakes_a_value_with_a_constant():
    exprs = [(f"rule {name}", expr) for name, expr in rule_exprs()]
    exprs += [(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]
    exprs += [(f"dashboard {board}", expr) for board, expr in dashboard_exprs()]
    offenders = [(where, expr) for where, expr in exprs if CONSTANT_FALLBACK.search(expr)]
    assert not offenders, f"constant fallbacks: {offenders}"


def test_every_dashboard_expression_parses(tmp_path):
    """promtool parses each panel's PromQL (Grafana's variables replaced as Grafana would)."""
    rules = []
    assert len(dashboard_exprs()) >= 40
    for i, (board, expr) in enumerate(dashboard_exprs()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{board}: a template variable other than {sorted(GRAFANA_VARIABLES)}: {expr}"
        rules.append({"record": f"dashboard:expr_{i}:check", "expr": expr})
    path = tmp_path / "dashboard-exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    _run(_tool("promtool"), "check", "rules", str(path))
