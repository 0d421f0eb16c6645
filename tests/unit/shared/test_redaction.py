from shared.redaction import REDACTED, Redactor, redact

KEY = "k3y-VALUE-that-is-secret-42"


def test_configured_secret_is_replaced_everywhere_it_appears():
    text = f"upstream said: key {KEY} is wrong; again {KEY}"
    out = Redactor([KEY]).redact(text)
    assert KEY not in out
    assert out.count(REDACTED) == 2


def test_bearer_tokens_and_sk_keys_are_redacted_even_when_not_configured():
    text = "headers: Authorization: Bearer abc.DEF-123_xyz and key sk-proj-AbCdEf0123456789"
    out = redact(text)
    assert "abc.DEF-123_xyz" not in out
    assert "AbCdEf0123456789" not in out
    assert f"Bearer {REDACTED}" in out
    assert f"sk-{REDACTED}" in out


def test_ordinary_text_is_left_alone():
    text = "HTTP 500 from the chat model: server_error (the bearer of bad news)"
    assert Redactor([KEY]).redact(text) == text


def test_too_short_or_empty_secrets_do_not_shred_text():
    text = "a quick brown fox"
    assert Redactor(["", "a"]).redact(text) == text


def test_longer_secret_containing_a_shorter_one_is_replaced_whole():
    out = Redactor(["secret", "secret-and-more"]).redact("x secret-and-more y")
    assert out == f"x {REDACTED} y"
