"""Content normalisation, summary, checksum and secret detection (pure functions, no DB)."""
from __future__ import annotations

import hashlib

import pytest

from bhgbrain_site.core.errors import InvalidInput, to_envelope
from memories.pipeline.normalize import (
    SECRET_MESSAGE,
    checksum,
    make_summary,
    normalize_content,
    reject_secrets,
)

EXPECTED_SECRET_MESSAGE = "Content appears to contain credentials or secrets. Memory rejected for safety."


# --------------------------------------------------------------------------- rule 1: control chars

@pytest.mark.parametrize(
    "char",
    ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x0e", "\x10", "\x1b", "\x1f", "\x7f"],
    ids=lambda c: f"0x{ord(c):02X}",
)
def test_control_characters_are_removed(char: str) -> None:
    assert normalize_content(f"ab{char}cd") == "abcd"


def test_all_listed_control_characters_removed_at_once() -> None:
    controls = "".join(chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
    assert normalize_content(f"x{controls}y") == "xy"


def test_newline_is_kept() -> None:
    assert normalize_content("line one\nline two") == "line one\nline two"


def test_lone_carriage_return_is_kept() -> None:
    # 0x0D is explicitly kept by rule 1 and only CRLF pairs are rewritten by rule 2.
    assert normalize_content("a\rb") == "a\rb"


def test_tab_inside_a_line_is_kept() -> None:
    # 0x09 is not in the control list; only trailing tabs go (rule 3).
    assert normalize_content("col1\tcol2") == "col1\tcol2"


def test_non_ascii_text_is_untouched() -> None:
    text = "Café — 日本語のメモ ✓"
    assert normalize_content(text) == text


# --------------------------------------------------------------------------- rule 2: CRLF -> LF

def test_crlf_becomes_lf() -> None:
    assert normalize_content("one\r\ntwo\r\nthree") == "one\ntwo\nthree"


def test_mixed_line_endings() -> None:
    assert normalize_content("one\r\ntwo\nthree") == "one\ntwo\nthree"


# --------------------------------------------------------------------------- rule 3: trailing blanks

def test_trailing_spaces_and_tabs_removed_on_every_line() -> None:
    assert normalize_content("alpha   \nbeta\t\t\ngamma \t \ndelta") == "alpha\nbeta\ngamma\ndelta"


def test_leading_indentation_of_inner_lines_is_kept() -> None:
    assert normalize_content("def f():\n    return 1") == "def f():\n    return 1"


def test_inner_spaces_are_kept() -> None:
    assert normalize_content("a  b\t\tc") == "a  b\t\tc"


# --------------------------------------------------------------------------- rule 4: blank-line runs

@pytest.mark.parametrize("newlines", [3, 4, 7])
def test_three_or_more_newlines_collapse_to_two(newlines: int) -> None:
    assert normalize_content("a" + "\n" * newlines + "b") == "a\n\nb"


def test_exactly_two_newlines_are_kept() -> None:
    assert normalize_content("a\n\nb") == "a\n\nb"


def test_single_newline_is_kept() -> None:
    assert normalize_content("a\nb") == "a\nb"


def test_several_runs_each_collapsed() -> None:
    assert normalize_content("a\n\n\nb\n\n\n\nc") == "a\n\nb\n\nc"


# --------------------------------------------------------------------------- rule 5: trim

def test_whole_string_is_trimmed() -> None:
    assert normalize_content("  \n\n  hello world \n\n\n  ") == "hello world"


def test_trim_keeps_leading_indentation_only_after_first_line() -> None:
    assert normalize_content("\n\n  first\n  second\n") == "first\n  second"


@pytest.mark.parametrize("raw", ["", "   ", "\n\n\n", "\r\n\t \r\n", "\x00\x01\x7f", " \x00 \n \x1f "])
def test_blank_or_control_only_content_normalises_to_empty(raw: str) -> None:
    assert normalize_content(raw) == ""


# --------------------------------------------------------------------------- ordering interactions

def test_controls_removed_before_trailing_space_stripping() -> None:
    # If trailing blanks were stripped first, the NUL would shield "   " and survive as "a   ".
    assert normalize_content("a   \x00\nb") == "a\nb"


def test_controls_removed_before_crlf_conversion() -> None:
    # "\r\x00\n" only becomes a CRLF pair once the NUL is gone.
    assert normalize_content("a\r\x00\nb") == "a\nb"


def test_crlf_converted_before_trailing_space_stripping() -> None:
    # With the \r still there, "   " would not be at the end of the line.
    assert normalize_content("a   \r\nb") == "a\nb"


def test_trailing_blanks_removed_before_collapsing_blank_runs() -> None:
    # Lines holding only spaces/tabs become empty and then take part in the collapse.
    assert normalize_content("a\n  \n\t\n \nb") == "a\n\nb"


def test_crlf_converted_before_collapsing_blank_runs() -> None:
    assert normalize_content("a\r\n\r\n\r\n\r\nb") == "a\n\nb"


def test_controls_removed_before_collapsing_blank_runs() -> None:
    assert normalize_content("a\n\x00\n\x07\n\x1b\nb") == "a\n\nb"


def test_trim_runs_last() -> None:
    assert normalize_content("\x00 \r\n\r\n\r\n  content \t\x7f\r\n\r\n\r\n") == "content"


@pytest.mark.parametrize(
    "raw",
    [
        "plain",
        "  a  \r\n\r\n\r\n\r\n b\t\x00 \n",
        "x\x0b\x0c\n\n\n\ny   \n",
        "日本語\r\n\r\n\r\n  テキスト  ",
    ],
)
def test_normalisation_is_idempotent(raw: str) -> None:
    once = normalize_content(raw)
    assert normalize_content(once) == once


# --------------------------------------------------------------------------- summary

def test_summary_of_single_short_line_is_the_line() -> None:
    assert make_summary("Deploys run from the main branch") == "Deploys run from the main branch"


def test_summary_is_first_line_only() -> None:
    assert make_summary("Title line\nsecond line\n\nthird paragraph") == "Title line"


def test_summary_from_normalised_multiline_content() -> None:
    normalised = normalize_content("\n\n  Heading   \r\n\r\n\r\nBody text that is long enough")
    assert make_summary(normalised) == "Heading"


def test_summary_of_exactly_120_chars_is_unchanged() -> None:
    line = "x" * 120
    assert make_summary(line) == line


def test_summary_of_121_chars_is_truncated_to_120_with_ellipsis() -> None:
    line = "abcdefghij" * 12 + "Z"  # 121 chars
    summary = make_summary(line)
    assert len(summary) == 120
    assert summary.endswith("...")
    assert summary == line[:117] + "..."
    assert "Z" not in summary


def test_summary_of_very_long_line_is_at_most_120() -> None:
    summary = make_summary("word " * 200)
    assert len(summary) <= 120
    assert summary.endswith("...")
    assert summary.startswith("word word")


def test_summary_truncation_does_not_leave_space_before_ellipsis() -> None:
    line = "a" * 116 + " " + "b" * 50  # char 117 (index 116) is a space
    summary = make_summary(line)
    assert len(summary) <= 120
    assert summary == "a" * 116 + "..."


def test_summary_multiline_with_long_first_line_truncates_only_the_first_line() -> None:
    content = "F" * 150 + "\nsecond line"
    summary = make_summary(content)
    assert summary == "F" * 117 + "..."
    assert "second" not in summary


def test_summary_multiline_short_first_line_ignores_long_rest() -> None:
    content = "Short title\n" + "body " * 100
    assert make_summary(content) == "Short title"


def test_summary_cjk_exactly_120_characters_is_unchanged() -> None:
    line = "漢" * 120  # 120 characters (360 UTF-8 bytes): the limit counts characters
    assert make_summary(line) == line


def test_summary_cjk_121_characters_is_truncated() -> None:
    line = "漢字" * 60 + "終"  # 121 characters
    summary = make_summary(line)
    assert len(summary) == 120
    assert summary == line[:117] + "..."


def test_summary_emoji_counts_as_one_character_each() -> None:
    summary = make_summary("🙂" * 200)
    assert summary == "🙂" * 117 + "..."


# --------------------------------------------------------------------------- checksum

def test_checksum_is_sha256_hex_of_the_text() -> None:
    # sha256("hello"), a well-known digest.
    assert checksum("hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"


def test_checksum_hashes_utf8_bytes() -> None:
    assert checksum("日本語") == hashlib.sha256("日本語".encode()).hexdigest()


def test_checksum_is_lowercase_hex_of_64_chars() -> None:
    digest = checksum("anything")
    assert len(digest) == 64
    assert all(c in "0123456789abcdef" for c in digest)


def test_checksum_equal_for_inputs_that_normalise_the_same() -> None:
    variants = [
        "Use Postgres for storage\n\nBecause it is boring",
        "  Use Postgres for storage  \r\n\r\n\r\nBecause it is boring \t",
        "\x00Use Postgres for storage\x07\n\n\n\n\nBecause it is boring\x7f\n",
        "\n\nUse Postgres for storage\t\r\n  \r\n\r\nBecause it is boring",
    ]
    digests = {checksum(normalize_content(v)) for v in variants}
    assert digests == {checksum("Use Postgres for storage\n\nBecause it is boring")}


def test_checksum_differs_when_normalised_content_differs() -> None:
    # Leading indentation and inner whitespace are significant.
    a = checksum(normalize_content("x\n  y"))
    b = checksum(normalize_content("x\ny"))
    c = checksum(normalize_content("x\n\ny"))
    assert len({a, b, c}) == 3


# --------------------------------------------------------------------------- secret detection

GH_BODY = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY2zA4"  # 36 chars, like a real token body

SECRET_CASES = {
    # key=value assignments
    "api_key": "api_key=abcd1234efgh",
    "api-key-spaced": "api-key = 9f8e7d6c5b4a",
    "apikey-quoted": 'apikey="Zx81Qw72Er63"',
    "API_KEY-upper": "API_KEY=live_5f3c2a",
    "secret": "secret=hunter2hunter2",
    "secret_key": "secret_key='not-so-secret-1'",
    "client_secret": "client_secret=Xy9Zz8Ww7",
    "token": "token=abc123def456",
    "auth_token": "auth_token = q1w2e3r4",
    "access_token": "access_token=ya29.a0AfH6SM",
    "password": "password=correcthorsebattery",
    "passwd": "passwd=letmein99",
    "pwd": "pwd=Tr0ub4dor",
    "password-in-sentence": "connect with password=Pa55word! to the db",
    # env-var style names ending in a key name
    "env-DB_PASSWORD": "DB_PASSWORD=hunter22",
    "env-OPENAI_API_KEY": "OPENAI_API_KEY=abcd1234efgh",
    "env-export-GITHUB_TOKEN": "export GITHUB_TOKEN=xyz12345",
    "env-AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENG",
    # key: value forms with machine-made values
    "yaml-api_key": "api_key: abc12345xyz",
    "yaml-password": "password: hunter2024",
    "yaml-secret": "secret: s3cretvalue",
    "yaml-token-quoted": 'token: "0a1b2c3d4e5f"',
    "json-password": '{"password": "hunter22x"}',
    "json-api_key": '{"user": "svc", "api_key": "abcd1234efgh"}',
    # AWS access key ids
    "aws-bare": "AKIA" + "Q2W3E4R5T6Y7U2I3",  # AWS's documented AKIA...EXAMPLE id is a placeholder
    "aws-in-prose": "the leaked key id was AKIAZ7Q4W3E2R1T0Y9U8 in the logs",
    # GitHub tokens
    "ghp": f"ghp_{GH_BODY}",
    "gho": f"gho_{GH_BODY}",
    "ghu": f"ghu_{GH_BODY}",
    "ghs": f"ghs_{GH_BODY}",
    "ghr": f"ghr_{GH_BODY}",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV",
    "ghp-in-url": f"git clone https://{'ghp_' + GH_BODY}@github.com/acme/repo.git",
    # OpenAI keys
    "openai-20": "sk-" + "a1B2c3D4e5F6g7H8i9J0",
    "openai-48": "sk-" + "Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9Bc2Ef4Hj6Km8Np0Qr2Tu4W",
    "openai-proj": "sk-proj-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0",
    "openai-in-prose": "set the client up with sk-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3" + " before the call",
    # PEM private keys
    "pem-pkcs8": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
    "pem-rsa": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA",
    "pem-ec": "-----BEGIN EC PRIVATE KEY-----",
    "pem-openssh": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
    "pem-encrypted": "-----BEGIN ENCRYPTED PRIVATE KEY-----",
    # secrets split by a control character: normalisation removes it and re-joins the secret
    "openai-hidden-by-nul": "sk-\x00" + "abcdefghijklmnopqrstuvwx",
    "ghp-hidden-by-bel": "ghp_\x07" + GH_BODY,
    "aws-hidden-by-esc": "AKIA\x1bQ2W3E4R5T6Y7U2I3",
    "pem-hidden-by-del": "-----BEGIN RSA PRIVATE\x7f KEY-----",
    "password-hidden-by-vt": "pass\x0bword=hunter22",
}


@pytest.mark.parametrize("raw", list(SECRET_CASES.values()), ids=list(SECRET_CASES))
def test_secret_is_rejected_with_exact_message(raw: str) -> None:
    normalised = normalize_content(raw)
    with pytest.raises(InvalidInput) as excinfo:
        reject_secrets(normalised)
    error = excinfo.value
    assert error.code == "INVALID_INPUT"
    assert error.message == EXPECTED_SECRET_MESSAGE
    assert str(error) == EXPECTED_SECRET_MESSAGE


@pytest.mark.parametrize("raw", list(SECRET_CASES.values()), ids=list(SECRET_CASES))
def test_secret_text_never_appears_in_the_error(raw: str) -> None:
    normalised = normalize_content(raw)
    with pytest.raises(InvalidInput) as excinfo:
        reject_secrets(normalised)
    status, body = to_envelope(excinfo.value)
    assert status == 400
    rendered = f"{excinfo.value} {excinfo.value.args!r} {body!r}"
    # Neither the whole secret nor any 8-character slice of it leaks into the error.
    for start in range(0, max(1, len(normalised) - 7)):
        fragment = normalised[start : start + 8]
        if fragment.strip() and fragment not in EXPECTED_SECRET_MESSAGE:
            assert fragment not in rendered


def test_secret_message_constant_matches_spec() -> None:
    assert SECRET_MESSAGE == EXPECTED_SECRET_MESSAGE


def test_control_char_hidden_key_is_not_matched_before_normalisation() -> None:
    # Documents why detection must run on normalised content: the raw form evades the pattern.
    raw = "sk-\x00" + "abcdefghijklmnopqrstuvwx"
    reject_secrets(raw)  # does not raise on the raw text
    with pytest.raises(InvalidInput):
        reject_secrets(normalize_content(raw))


PROSE_CASES = [
    # from the spec
    "our token bucket rate limiter",
    "password reset flow",
    "the secret to good APIs is consistency",
    "use scikit-learn (sk-learn) for the model",
    "rotate the API key every 90 days",
    "token: see the vault docs",
    # more ordinary prose / harmless config
    "Passwords are hashed with argon2id before storage.",
    "Store the API key in the secret manager, never in the repository.",
    "Rate limit: 100 tokens per minute per client.",
    "max_tokens=4096 for the summariser prompt",
    '{"max_tokens": 4096, "temperature": 0.2}',
    "CSRF token validation is enabled on every form.",
    "password: required, minimum 12 characters",
    "secret: ask the platform team",
    "GitHub personal tokens start with ghp_ and fine-grained ones with github_pat_",
    "AWS access key ids start with AKIA",
    "The -----BEGIN PUBLIC KEY----- block is safe to share.",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE",
    "the task-scheduling-service-for-the-whole-team runs hourly",
    "OpenAI keys look like sk- followed by random characters",
    "sk-" + "a" * 19,  # one short of the 20-character minimum
    "AKIA" + "ABCDEFGHIJ12345",  # only 15 characters after AKIA
    "The passwordless login flow uses magic links.",
    "Run pwd to print the working directory.",
]


@pytest.mark.parametrize("raw", PROSE_CASES)
def test_ordinary_prose_is_not_rejected(raw: str) -> None:
    reject_secrets(normalize_content(raw))  # must not raise


def test_normalisation_is_idempotent_for_stray_carriage_returns() -> None:
    once = normalize_content("a\r\r\nb\r\n")
    assert once == "a\nb"
    assert normalize_content(once) == once
