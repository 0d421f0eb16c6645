"""The attack suite's judgement without a stack: how outcomes are counted and reported, when a
run fails, and the suite's own model of who may see which artifact."""
from __future__ import annotations

import json

import pytest

from benchmarks.attacks.oracle import Artifact, Oracle, TenantRules, Viewer, artifact_of
from benchmarks.attacks.tally import Report

RULES = {"acme": TenantRules.from_config({"session_tag_prefixes": ["department:"],
                                         "sources": {"wiki": {"groups": ["engineering"]}}})}
ARTIFACTS = [
    Artifact("open", "acme", "docs"),
    Artifact("legal", "acme", "legal", groups=frozenset({"legal"})),
    Artifact("wiki-page", "acme", "wiki"),
    Artifact("sales", "acme", "docs", tags=frozenset({"department:sales"})),
    Artifact("globex-doc", "globex", "docs"),
]
ORACLE = Oracle(ARTIFACTS, RULES, {"CANARYLEGAL": "acme/legal", "CANARYINJECTED": "acme/injected"})


def test_a_clean_run_counts_every_outcome_and_passes():
    report = Report()
    fam = report.family("(a)", "ports")
    for _ in range(3):
        fam.record("refused")
    fam.record("served")
    fam.check("control works", True, "served", calls=2, refused=0)
    assert fam.calls == 6 and fam.counts["refused"] == 3 and fam.counts["served"] == 3
    assert report.ok and report.exit_code() == 0
    assert report.lines()[-1].strip() == "result: PASS"


@pytest.mark.parametrize("outcome", ["leak", "missed", "error"])
def test_any_leak_miss_or_error_fails_the_run_and_names_the_reason(outcome):
    report = Report()
    report.family("(a)", "ports").record("refused")
    fam = report.family("(b)", "matrix")
    fam.record(outcome, "gRPC SearchAndRank", "alice: legal-hotel-settlement")
    assert not report.ok and report.exit_code() == 1
    text = "\n".join(report.lines())
    assert f"{outcome}: gRPC SearchAndRank (calls: 1)" in text and "alice: legal-hotel-settlement" in text
    assert text.endswith("result: FAIL")
    figures = json.loads(json.dumps(report.figures()))
    assert figures["ok"] is False and figures["total"]["calls"] == 2
    assert figures["families"]["(b)"][outcome] == 1 and figures["families"]["(a)"]["ok"] is True


def test_a_failed_check_is_a_miss_and_keeps_what_was_observed():
    report = Report()
    fam = report.family("(c)", "findings")
    assert not fam.check("tools/call name=123 is -32602", False, "tool error: unhandled", calls=1)
    assert fam.counts["missed"] == 1 and fam.calls == 1
    assert "FAIL  tools/call name=123 is -32602: tool error: unhandled" in "\n".join(report.lines())
    assert report.figures()["families"]["(c)"]["checks"][0]["passed"] is False


def test_each_family_table_breaks_calls_down_by_row_and_totals_them():
    report = Report()
    fam = report.family("(a)", "ports")
    fam.record("refused", row="knowledge_store gRPC")
    fam.record("missed", "not refused", "GetEntries", row="knowledge_store gRPC")
    fam.section = "controls"
    fam.check("control", True, "served")
    lines = report.lines()
    ks = next(line for line in lines if line.strip().startswith("knowledge_store gRPC"))
    assert ks.split()[-6:] == ["2", "1", "0", "0", "1", "0"]
    total = next(line for line in lines if line.strip().startswith("total"))
    assert total.split()[-6:] == ["3", "1", "1", "0", "1", "0"]
    assert report.figures()["families"]["(a)"]["rows"]["controls"] == {
        "calls": 1, "refused": 0, "served": 1, "leak": 0, "missed": 0, "error": 0}


def test_examples_are_bounded_per_reason():
    fam = Report().family("(b)", "matrix")
    for i in range(50):
        fam.record("leak", "rag_search", f"example {i}")
    assert fam.counts["leak"] == 50 and len(fam.failures["leak: rag_search"]) == 5
    assert fam.figures()["failures"]["leak: rag_search"]["calls"] == 50


def test_an_empty_report_does_not_pass_and_unknown_outcomes_are_refused():
    assert Report().exit_code() == 1
    with pytest.raises(ValueError):
        Report().family("x", "y").record("fine")


def test_the_oracle_applies_tenant_groups_source_rules_and_session_tags():
    alice = Viewer("alice", "acme")
    legal = Viewer("sec", "acme", frozenset({"legal"}))
    eng = Viewer("eng", "acme", frozenset({"engineering"}))
    sales = Viewer("sam", "acme", session_tags=("department:sales", "Q4"))
    untagged_prefix = Viewer("q4", "acme", session_tags=("Q4",))
    assert ORACLE.visible_ids(alice) == {"open", "sales"}
    assert ORACLE.visible_ids(legal) == {"open", "sales", "legal"}
    assert ORACLE.visible_ids(eng) == {"open", "sales", "wiki-page"}
    assert ORACLE.visible_ids(sales) == {"sales"}
    assert ORACLE.visible_ids(untagged_prefix) == {"open", "sales"}
    assert ORACLE.visible_ids(Viewer("gina", "globex")) == {"globex-doc"}


def test_the_oracle_names_hidden_unknown_and_canary_leaks():
    alice = Viewer("alice", "acme")
    assert ORACLE.leaks(alice, ["open", "sales"], "nothing secret") == []
    assert ORACLE.leaks(alice, ["legal", "globex-doc", "open"]) == ["legal", "globex-doc (unknown or of another tenant)"]
    assert ORACLE.leaks(alice, [], "... CANARYLEGAL ...") == ["canary CANARYLEGAL"]
    assert ORACLE.leaks(Viewer("sec", "acme", frozenset({"legal"})), ["legal"], "CANARYLEGAL") == []
    assert ORACLE.leaks(Viewer("sec", "acme", frozenset({"legal"})), [], "CANARYINJECTED") == ["canary CANARYINJECTED"]
    assert artifact_of("legal#3") == "legal" and artifact_of("open") == "open"
