"""Signed document links: any change to what was signed, a late use, or another user is refused."""
from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest

from shared.log import redact
from shared.signing import LinkRejected, LinkSigner

SECRET = b"link-secret-for-tests-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def signer(clock) -> LinkSigner:
    return LinkSigner(SECRET, "https://rag.example.test/", 900, now=clock)


def _with(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.mark.parametrize("entry_id", ["travel-policy#0", "a/b c#12", "résumé#3"])
def test_a_signed_link_verifies_to_what_was_signed(signer, entry_id):
    url = signer.sign(entry_id, "acme", "alice@acme.test", ("hr", "eng"))
    assert url.startswith("https://rag.example.test/documents/")
    claims = signer.verify_link(url, "alice@acme.test")
    assert (claims.entry_id, claims.tenant_id, claims.user_id, claims.groups) == \
        (entry_id, "acme", "alice@acme.test", ("eng", "hr"))
    assert claims.expires_unix == 1_800_000_000 + 900


@pytest.mark.parametrize("change", [
    {"t": "globex"}, {"u": "mallory"}, {"g": "eng,hr,security-team"}, {"exp": "1900000000"},
    {"sig": "AAAA"}, {"sig": ""},
])
def test_any_tampering_is_refused(signer, change):
    url = signer.sign("doc#0", "acme", "alice", ("eng", "hr"))
    with pytest.raises(LinkRejected) as err:
        signer.verify_link(_with(url, **change))
    assert err.value.reason == "tampered"


def test_pointing_a_link_at_another_entry_is_refused(signer):
    url = signer.sign("public#0", "acme", "alice")
    with pytest.raises(LinkRejected) as err:
        signer.verify_link(url.replace("/documents/public%230", "/documents/secret%230"))
    assert err.value.reason == "tampered"


def test_expired_links_are_refused(signer, clock):
    url = signer.sign("doc#0", "acme", "alice")
    clock.now += 900
    assert signer.verify_link(url).entry_id == "doc#0"
    clock.now += 1
    with pytest.raises(LinkRejected) as err:
        signer.verify_link(url)
    assert err.value.reason == "expired"


def test_a_link_for_another_user_is_refused(signer):
    url = signer.sign("doc#0", "acme", "alice")
    with pytest.raises(LinkRejected) as err:
        signer.verify_link(url, "bob")
    assert err.value.reason == "wrong_user"


def test_another_secret_does_not_verify(signer, clock):
    url = signer.sign("doc#0", "acme", "alice")
    other = LinkSigner(b"another-secret-0123456789abcdef", "https://rag.example.test", 900, now=clock)
    with pytest.raises(LinkRejected) as err:
        other.verify_link(url)
    assert err.value.reason == "tampered"


@pytest.mark.parametrize("url", [
    "https://rag.example.test/other/doc%230?t=a&u=b&g=&exp=1&sig=x",
    "https://rag.example.test/documents/doc%230",
    "https://rag.example.test/documents/doc%230?t=a&t=b&u=b&g=&exp=1&sig=x",
    "https://rag.example.test/documents/doc%230?t=a&u=b&g=&exp=soon&sig=x",
    "https://rag.example.test/documents/?t=a&u=b&g=&exp=1&sig=x",
])
def test_malformed_links_are_refused(signer, url):
    with pytest.raises(LinkRejected) as err:
        signer.verify_link(url)
    assert err.value.reason == "malformed"


def test_no_secret_means_a_random_per_process_secret_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        a = LinkSigner.from_secret_text("", "http://127.0.0.1:8063", 60)
        b = LinkSigner.from_secret_text("", "http://127.0.0.1:8063", 60)
    assert "restart" in caplog.text
    with pytest.raises(LinkRejected):
        b.verify_link(a.sign("doc#0", "acme", "alice"))


def test_signatures_are_redacted_from_log_lines(signer):
    url = signer.sign("doc#0", "acme", "alice")
    sig = parse_qs(urlsplit(url).query)["sig"][0]
    assert sig not in redact(f"opening {url}")
