"""Content normalisation, secret detection, summary and checksum (seed: 内容规范化)."""
from __future__ import annotations

import hashlib
import re

from bhgbrain_site.contracts import SUMMARY_MAX
from bhgbrain_site.errors import InvalidInput

SECRET_MESSAGE = "Content appears to contain credentials or secrets. Memory rejected for safety."

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CRLF_RE = re.compile(r"\r+\n")
_TRAILING_WS_RE = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUN_RE = re.compile(r"\n{3,}")

_KEY_NAMES = (
    r"(?:api[_-]?key|apikey|access[_-]?key|secret(?:[_-]?key)?|client[_-]?secret|token|auth[_-]?token"
    r"|access[_-]?token|password|passwd|pwd)"
)
SECRET_PATTERNS: dict[str, re.Pattern[str]] = {
    # key=value assignments: any value of 4+ non-space characters.
    # The key name may be the tail of an env-var style name (DB_PASSWORD=, OPENAI_API_KEY=):
    # "_" is a word character, so \b would never fire there; only letters/digits may precede it.
    "assignment": re.compile(rf"(?<![A-Za-z0-9]){_KEY_NAMES}\s*=\s*[\"']?[^\s\"'=]{{4,}}", re.IGNORECASE),
    # key: value (YAML / JSON / prose): only values that look machine-made (8+ chars with a digit).
    # The optional quote after the name covers JSON keys ("password": "...").
    "colon_assignment": re.compile(
        rf"(?<![A-Za-z0-9]){_KEY_NAMES}[\"']?\s*:\s*[\"']?(?=[^\s\"']*\d)[^\s\"']{{8,}}", re.IGNORECASE
    ),
    "aws_access_key_id": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "github_token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    "openai_key": re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    "pem_private_key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
}


def normalize_content(content: str) -> str:
    """The seed's five steps: controls, CRLF, trailing blanks, blank runs, trim."""
    text = _CONTROL_RE.sub("", content)
    text = _CRLF_RE.sub("\n", text)  # \r+\n, so that normalising twice changes nothing
    text = _TRAILING_WS_RE.sub("", text)
    text = _BLANK_RUN_RE.sub("\n\n", text)
    return text.strip()


def find_secret(text: str) -> str | None:
    """Name of the first secret pattern the text matches, or None."""
    for name, pattern in SECRET_PATTERNS.items():
        if pattern.search(text):
            return name
    return None


def reject_secrets(text: str) -> None:
    """Raise INVALID_INPUT (without echoing anything) when text holds a credential."""
    if find_secret(text) is not None:
        raise InvalidInput(SECRET_MESSAGE, field="content")


def make_summary(normalized: str) -> str:
    """First line, at most SUMMARY_MAX (120) chars (truncated with '...')."""
    first_line = normalized.split("\n", 1)[0].strip()
    if len(first_line) <= SUMMARY_MAX:
        return first_line
    return first_line[: SUMMARY_MAX - 3].rstrip() + "..."


def checksum(normalized: str) -> str:
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()
