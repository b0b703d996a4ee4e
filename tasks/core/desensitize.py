"""One function that strips secrets, tokens, internal hostnames and IPs from anything we publish.

Used by the manifest, summary.json, the report and our log lines: an archive is shared widely.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

# A key that names a secret: ends with one of these words (so prompt_tokens is not one).
_SECRET_KEY = re.compile(
    r"(?:^|[_.-])(?:pass(?:word)?|passwd|secret|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|"
    r"auth(?:orization)?|token|session[_-]?token|secret[_-]?access[_-]?key)$|^(?:password|secret|token)$",
    re.I,
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # key=value / key: value with a secret-looking key
    (re.compile(r"(?i)\b([\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key))\s*([=:])\s*(\"?)[^\s\"',;&]+"),
     r"\1\2\3" + REDACTED),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (re.compile(r"(?i)(https?://)[^/\s:@]+:[^/\s@]+@"), r"\1" + REDACTED + "@"),  # user:pass@host
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),  # AWS access key ids
    (re.compile(r"\b(?:sk|hf|ghp|gho|xox[bap])[-_][A-Za-z0-9_-]{16,}\b"), REDACTED),  # common token shapes
    (re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"), REDACTED),  # JWTs
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<ip>"),
    # IPv6: eight groups, or a "::" compression (so times of day like 07:46:24 are left alone)
    (re.compile(r"\[?\b(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}\b\]?", re.I), "<ip>"),
    (re.compile(r"\[?(?<![\w:])(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){0,6})?::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){0,6})?(?![\w:])\]?",
                re.I), "<ip>"),
    # internal hostnames: anything under a private-looking domain, or a cluster service name
    (re.compile(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:internal|local|lan|corp|intra|cluster\.local|svc)\b(?::\d+)?", re.I),
     "<host>"),
    (re.compile(r"\blocalhost(?::\d+)?\b", re.I), "<host>"),
)


# An environment variable holds a credential when a word of its name says so; every other value is a
# setting (many engine switches are variables), recorded so that the start can be repeated.
_SECRET_ENV_WORD = re.compile(
    r"(?:^|_)(?:TOKEN|KEY|APIKEY|SECRET|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS?|AUTH|AUTHORIZATION|COOKIE|"
    r"SESSION|LICEN[CS]E|CERT|PRIVATE)(?:_|$)", re.I)


def secret_name(name: str) -> bool:
    """Whether a setting named `name` (an environment variable, a field) holds a credential: the one rule
    for what is withheld from the manifest, the pin identity and the applied objects."""
    return bool(_SECRET_KEY.search(name) or _SECRET_ENV_WORD.search(name))


def recorded_env(env: dict[str, str]) -> dict[str, str]:
    """An engine's environment as the run records it: values kept (scrubbed of hosts and tokens),
    those of secret-named variables withheld."""
    return {k: REDACTED if secret_name(k) else scrub_text(str(v)) for k, v in sorted(env.items())}


def shown_endpoint(url: str) -> str:
    """An endpoint as published: its scheme, port and path, never its host (an in-cluster service name,
    a node's address: nothing a reader of the archive needs, and something an attacker would)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return scrub_text(f"{parts.scheme}://<host>{port}{parts.path}") if parts.scheme else "<host>"


# Values this process has read as secrets (engines' API keys, tasks/engines/access.py): whatever shape
# they have, no pattern could know them, so each is scrubbed literally from everything published here.
_READ_SECRETS: set[str] = set()


def register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _READ_SECRETS.add(value)


def scrub_text(text: str) -> str:
    for secret in _READ_SECRETS:
        text = text.replace(secret, REDACTED)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def desensitize(value: Any, *, extra_secrets: tuple[str, ...] = ()) -> Any:
    """Return a copy with secret-named fields blanked and secrets, hosts and IPs scrubbed from text.

    `extra_secrets` are literal values known to be secret (e.g. credentials of the run's connections).
    """
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and _SECRET_KEY.search(k) and isinstance(v, (str, int, float)) and v not in ("", None):
                out[k] = REDACTED
            else:
                out[k] = desensitize(v, extra_secrets=extra_secrets)
        return out
    if isinstance(value, (list, tuple)):
        return [desensitize(v, extra_secrets=extra_secrets) for v in value]
    if isinstance(value, str):
        for s in extra_secrets:
            if s and len(s) >= 4:
                value = value.replace(s, REDACTED)
        return scrub_text(value)
    return value
