"""The observability kit's files (deploy/observability/) as data, for the tests.

    KIT                      deploy/observability
    ALERTS_FILE, RECORDING_FILE, RULE_TESTS (the promtool unit tests), DASHBOARDS, OPERATIONS_DOC
    dashboard_exprs()        [(dashboard file name, PromQL of a panel target)] for every panel target
                             of every dashboard
    rule_exprs()             [(record name, PromQL)] of every recording rule
    alert_rules()            [the alert rule dicts (alert, expr, for, labels, annotations)]
    github_anchor(heading)   the #anchor GitHub makes for a Markdown heading
    doc_anchors(path)        every heading anchor of a Markdown file (duplicates numbered -1, -2 ...)
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "deploy" / "observability"
RULES_DIR = KIT / "prometheus" / "rules"
ALERTS_FILE = RULES_DIR / "nucleus-alerts.yml"
RECORDING_FILE = RULES_DIR / "nucleus-recording.yml"
RULE_TESTS = KIT / "prometheus" / "tests"
DASHBOARDS = KIT / "grafana" / "dashboards"
OPERATIONS_DOC = ROOT / "docs" / "OPERATIONS.md"


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_panels(panel.get("panels") or []))        # panels of a collapsed row
    return out


def dashboard_panels(path: Path) -> list[dict[str, Any]]:
    return _panels(json.loads(path.read_text()).get("panels") or [])


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(path.name, target["expr"]) for path in sorted(DASHBOARDS.glob("*.json"))
            for panel in dashboard_panels(path) for target in panel.get("targets") or [] if target.get("expr")]


def _rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def rule_exprs() -> list[tuple[str, str]]:
    return [(rule["record"], rule["expr"]) for rule in _rules(RECORDING_FILE) if "record" in rule]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in _rules(ALERTS_FILE) if "alert" in rule]


def github_anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def doc_anchors(path: Path = OPERATIONS_DOC) -> set[str]:
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            anchor = github_anchor(match.group(1))
            n = counts.get(anchor, 0)
            counts[anchor] = n + 1
            anchors.add(anchor if n == 0 else f"{anchor}-{n}")
    return anchors


__all__ = ["ALERTS_FILE", "DASHBOARDS", "KIT", "OPERATIONS_DOC", "RECORDING_FILE", "RULE_TESTS",
           "alert_rules", "dashboard_exprs", "dashboard_panels", "doc_anchors", "github_anchor", "rule_exprs"]
