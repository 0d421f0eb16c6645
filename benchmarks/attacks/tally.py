"""Counting an attack family's calls and what came of them, and the report of a whole run.

Every probe is one call and ends in exactly one outcome:

    refused    an expected refusal (UNAUTHENTICATED, HTTP 401, PERMISSION_DENIED, NOT_FOUND, ...)
    served     answered, and nothing in the answer was forbidden (a result, an empty list)
    leak       answered with something the caller may not see (a canary, a hidden artifact id)
    missed     a refusal that was expected did not happen, or a check's answer was wrong
    error      the probe could not tell (timeout, internal error, a positive control failed)

A run passes when no family has a leak, a miss or an error. `Check`s are the named findings
of family (c) and the positive controls: each passes or fails with what was observed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OUTCOMES = ("refused", "served", "leak", "missed", "error")
FAILING = ("leak", "missed", "error")
_EXAMPLES = 5          # failure descriptions kept per distinct reason


@dataclass
class Check:
    name: str
    passed: bool
    observed: str


@dataclass
class Family:
    key: str
    title: str
    counts: Counter = field(default_factory=Counter)
    rows: dict[str, Counter] = field(default_factory=dict)           # breakdown: row -> outcome counts
    failures: dict[str, list[str]] = field(default_factory=dict)    # reason -> examples
    failure_counts: Counter = field(default_factory=Counter)        # reason -> calls
    checks: list[Check] = field(default_factory=list)
    section: str = ""              # the breakdown row of calls recorded without one

    @property
    def calls(self) -> int:
        return sum(self.counts[o] for o in OUTCOMES)

    def _count(self, outcome: str, row: str, n: int = 1) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        if n > 0:
            self.counts[outcome] += n
            self.rows.setdefault(row or self.section or "other", Counter())[outcome] += n

    def record(self, outcome: str, reason: str = "", example: str = "", *, row: str = "") -> None:
        """One call's outcome (counted in `row` of the breakdown); a failing outcome keeps its
        reason and a few examples."""
        self._count(outcome, row)
        if outcome in FAILING:
            key = f"{outcome}: {reason or 'unspecified'}"
            self.failure_counts[key] += 1
            examples = self.failures.setdefault(key, [])
            if len(examples) < _EXAMPLES and example:
                examples.append(example)

    def check(self, name: str, passed: bool, observed: str, *, calls: int = 1, refused: int = 0,
              row: str = "") -> bool:
        """A named check that took `calls` calls (`refused` of them refusals, as expected)."""
        self.checks.append(Check(name, passed, observed))
        self._count("refused", row, refused)
        self._count("served", row, max(0, calls - refused - (0 if passed else 1)))
        if not passed:
            self.record("missed", name, observed, row=row)
        return passed

    @property
    def ok(self) -> bool:
        return not any(self.counts[o] for o in FAILING)

    def figures(self) -> dict[str, Any]:
        return {"title": self.title, "calls": self.calls, **{o: self.counts[o] for o in OUTCOMES},
                "ok": self.ok,
                "rows": {r: {"calls": sum(c.values()), **{o: c[o] for o in OUTCOMES}} for r, c in self.rows.items()},
                "failures": {r: {"calls": self.failure_counts[r], "examples": e} for r, e in self.failures.items()},
                "checks": [{"name": c.name, "passed": c.passed, "observed": c.observed} for c in self.checks]}


@dataclass
class Report:
    families: list[Family] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def family(self, key: str, title: str) -> Family:
        fam = Family(key, title)
        self.families.append(fam)
        return fam

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.families)

    def exit_code(self) -> int:
        return 0 if self.ok and self.families else 1

    def figures(self) -> dict[str, Any]:
        total = Counter()
        for f in self.families:
            total.update({o: f.counts[o] for o in OUTCOMES})
        return {"ok": self.ok, **self.meta, "total": {"calls": sum(total.values()), **{o: total[o] for o in OUTCOMES}},
                "families": {f.key: f.figures() for f in self.families}}

    def lines(self) -> list[str]:
        """The report as plain text: a table per family (a row per port, call or check group,
        and the family's total), then each check and each failure with a few examples."""
        out: list[str] = []
        for f in self.families:
            out += ["", f"{f.key} {f.title}", _row("", None), "-" * _WIDTH]
            out += [_row(name, counts) for name, counts in f.rows.items()]
            out += ["-" * _WIDTH, _row("total", f.counts)]
        for f in self.families:
            if f.checks:
                out.append(f"\n{f.key} checks:")
                out.extend(f"  {'PASS' if ch.passed else 'FAIL'}  {ch.name}: {ch.observed}" for ch in f.checks)
        for f in self.families:
            for reason, examples in f.failures.items():
                out.append(f"\n{f.key} {reason} (calls: {f.failure_counts[reason]})")
                out.extend(f"    {e}" for e in examples)
        out.append(f"\nresult: {'PASS' if self.ok else 'FAIL'}")
        return out


_WIDTH = 112


def _row(name: str, counts: Counter | None) -> str:
    """One line of a family's table (the header when `counts` is None)."""
    if counts is None:
        return f"{'':<66} {'calls':>6} {'refused':>8} {'served':>7} {'leaks':>6} {'missed':>7} {'errors':>7}"
    return (f"  {name:<64.64} {sum(counts[o] for o in OUTCOMES):>6} {counts['refused']:>8} {counts['served']:>7} "
            f"{counts['leak']:>6} {counts['missed']:>7} {counts['error']:>7}")


__all__ = ["Check", "FAILING", "Family", "OUTCOMES", "Report"]
