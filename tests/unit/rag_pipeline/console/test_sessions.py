"""Console sessions: a fresh id per login, expiry (credential, lifetime, idle), revocation; the login limit."""
from __future__ import annotations

from services.rag_pipeline.console.sessions import LoginLimiter, SessionStore
from shared.identity import Principal

ALICE = Principal(tenant_id="acme", user_id="alice")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_every_login_gets_a_new_random_id_and_csrf_token():
    store = SessionStore()
    a, b = store.create(ALICE), store.create(ALICE)
    assert a.session_id != b.session_id and a.csrf != b.csrf and len(a.session_id) >= 40
    assert a.csrf_ok(a.csrf) and not a.csrf_ok(b.csrf) and not a.csrf_ok("") and not a.csrf_ok(None)


def test_a_session_ends_at_the_credential_expiry_the_idle_timeout_or_logout():
    clock = Clock()
    store = SessionStore(lifetime_s=3600, idle_s=600, clock=clock)
    short = store.create(ALICE, credential_expires_at=clock.now + 100)
    idle = store.create(ALICE)
    revoked = store.create(ALICE)
    assert short.expires_at == clock.now + 100 and idle.expires_at == clock.now + 3600
    store.revoke(revoked.session_id)
    assert store.get(revoked.session_id) is None
    clock.now += 99
    assert store.get(short.session_id) is short and store.get(idle.session_id) is idle
    clock.now += 1
    assert store.get(short.session_id) is None               # the credential's expiry
    clock.now += 598
    assert store.get(idle.session_id) is idle                # each request restarts the idle clock
    clock.now += 600
    assert store.get(idle.session_id) is None                # idle
    assert store.get(None) is None and store.get("forged") is None


def test_logins_are_limited_per_client_address():
    clock = Clock()
    limiter = LoginLimiter(attempts=3, window_s=60, clock=clock)
    assert [limiter.allow("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("10.0.0.2")
    clock.now += 60
    assert limiter.allow("10.0.0.1")
