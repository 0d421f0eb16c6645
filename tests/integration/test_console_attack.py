"""Family (g) of the attack suite (benchmarks/attacks/console.py) alone, against the suite's
authenticated stack: session fixation, CSRF, stored XSS, cross-tenant fields, role escalation,
the login limit and refused credentials, logout, over plain HTTP. The family adds its hostile
document and removes it again; its clients use loopback addresses of their own, so its login
brute force does not lock out the other console tests."""
from __future__ import annotations

import asyncio
import time

import pytest

from benchmarks.attacks import console
from benchmarks.attacks.run import FAMILIES
from benchmarks.attacks.tally import Report

pytestmark = pytest.mark.integration

MIN_CALLS = 120


async def test_the_console_attack_family_passes(secure_corpus):
    report = Report()
    fam = report.family("(g)", FAMILIES["g"])
    started = time.perf_counter()
    await asyncio.to_thread(console.run, fam, secure_corpus)      # the family runs its own event loops
    seconds = time.perf_counter() - started
    text = "\n".join(report.lines())
    print(f"\n{text}\n({seconds:.1f} s)")
    assert fam.ok, text
    assert fam.calls >= MIN_CALLS and fam.counts["refused"] >= 40, text
    assert len(fam.checks) >= 60 and all(c.passed for c in fam.checks), text
    assert {"controls", "session fixation", "CSRF", "stored XSS", "cross-tenant", "role escalation", "admin pages",
            "login", "logout", "headers"} <= set(fam.rows), text
