"""Secrets stay secret even when an agent prints them: every secret value levelfield knows is
masked as it is written (a phase's output, the proxy's conversation, the trajectory), and again in
the trial's files and record when it ends, the way CI systems mask secrets in build logs. A run
killed with SIGKILL mid-trial therefore leaves nothing unmasked in what levelfield wrote.

Known values: the agent's API key (from its variable or its file), the trial's dummy token, and
the value of every variable of the harness's environment whose name says it holds a secret
(…_KEY, …_TOKEN, …_SECRET, …PASSWORD…, …_CREDENTIALS, DATABASE_URL), plus the password of any
URL in that environment (`PIP_INDEX_URL=https://user:token@host/simple`). Whatever its value, a
credential written in a URL (`scheme://user:token@host`) is masked too. Values shorter than
MIN_SECRET_CHARS are left alone: masking "1" would mask every digit of a log and protect nothing.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

MASK = "***"
MIN_SECRET_CHARS = 8
SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|CREDENTIALS?)$|PASSWORD|PASSWD|^DATABASE_URL$", re.IGNORECASE
)
# The userinfo of a URL: `//user:password@` (the password masked), or `//token@` for a user
# name long enough to be a token (`https://ghp_…@github.com`). No scheme needed, so a URL split
# after its scheme is still recognised. Only the characters RFC 3986 allows in userinfo, so that
# binary files are left alone.
_USERINFO = rb"[\w.~%!$&'()*+,;=-]"
_URL_PASSWORD = re.compile(rb"(//" + _USERINFO + rb"*:)(" + _USERINFO + rb"+)(@)")
_URL_TOKEN_USER = re.compile(rb"(//)(" + _USERINFO + rb"{16,})(@)")
_URL_OPEN = re.compile(rb"//[\w.~%!$&'()*+,;=:-]{0,256}\Z")  # may go on in the next write
_DANGLING_PASSWORD = re.compile(rb"(//" + _USERINFO + rb"*:)(" + _USERINFO + rb"+)\Z")


@dataclass
class Masker:
    """The secret values of one trial; `add` takes more (its dummy token, for instance) and every
    writer made from it sees them from then on."""

    values: set[str] = field(default_factory=set)
    _encoded: tuple[int, list[bytes]] = field(default=(0, []), repr=False, compare=False)

    def add(self, *values: str | None) -> Masker:
        for value in values:
            if value and len(value) >= MIN_SECRET_CHARS:
                self.values.add(value)
        return self

    def _ordered(self) -> list[bytes]:
        """Longest first, so that a key containing another is masked whole. Values only grow,
        so their count says whether the list is current."""
        if self._encoded[0] != len(self.values):
            ordered = sorted((v.encode() for v in self.values), key=len, reverse=True)
            self._encoded = (len(ordered), ordered)
        return self._encoded[1]

    def text(self, text: str) -> str:
        return self.data(text.encode(errors="surrogatepass")).decode(errors="surrogatepass")

    def data(self, raw: bytes) -> bytes:
        for value in self._ordered():
            raw = raw.replace(value, MASK.encode())
        raw = _URL_PASSWORD.sub(rb"\1" + MASK.encode() + rb"\3", raw)
        return _URL_TOKEN_USER.sub(rb"\1" + MASK.encode() + rb"\3", raw)

    def record(self, model: M) -> M:
        """A stored model with every string value masked (field names are never touched, so a
        secret that happens to equal one cannot break the record)."""
        dumped = model.model_dump(mode="json")
        masked = self.value(dumped)
        return model if masked == dumped else type(model).model_validate(masked)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def writer(self, sink: BinaryIO) -> MaskingWriter:
        return MaskingWriter(self, sink)


class MaskingWriter:
    """Writes a stream to `sink` with every secret masked before it reaches the file. A secret
    can arrive split across two writes (a pipe hands over whatever was written so far), so the
    tail that could be the start of one is held back until the next write shows how it goes on.
    `close()` writes that tail, masked if it is a secret's first MIN_SECRET_CHARS or more."""

    def __init__(self, masker: Masker, sink: BinaryIO) -> None:
        self.masker, self.sink = masker, sink
        self._held = b""
        self.changed = False  # whether anything was masked

    def write(self, data: bytes) -> int:
        given = self._held + data
        masked = self.masker.data(given)
        self.changed |= masked != given
        keep = self._held_back(masked)
        self._held = masked[len(masked) - keep :] if keep else b""
        self.sink.write(masked[: len(masked) - keep])
        return len(data)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        held = self._held
        self._held = b""
        tail = held
        if any(len(tail) >= MIN_SECRET_CHARS and v.startswith(tail) for v in self._values()):
            tail = MASK.encode()
        tail = _DANGLING_PASSWORD.sub(rb"\1" + MASK.encode(), tail)
        self.changed |= tail != held
        self.sink.write(tail)
        self.sink.flush()

    def _values(self) -> list[bytes]:
        return self.masker._ordered()

    def _held_back(self, data: bytes) -> int:
        """How many trailing bytes could still become a secret or a URL's userinfo."""
        keep = 1 if data.endswith(b"/") else 0
        for value in self._values():
            for size in range(min(len(value) - 1, len(data)), keep, -1):
                if data.endswith(value[:size]):
                    keep = size
                    break
        url = _URL_OPEN.search(data)
        return max(keep, len(data) - url.start()) if url is not None else keep


# Secrets whose values levelfield was never told: an assignment to a variable named like a secret
# (`export OPENAI_API_KEY=sk-...`, as an agent's command line in another harness's error message
# carries it) or a JSON key so named, a provider key by its shape, a bearer token.
_SECRET_ASSIGNMENT = re.compile(
    r"\b([A-Za-z0-9_]*(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?))"
    r"(\s*=\s*|[\"']\s*:\s*)([\"']?)[^\s'\"&;|,}]+",
    re.IGNORECASE,
)
_SECRET_SHAPE = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|(?<=Bearer )[A-Za-z0-9._~+/-]{16,})")


# A quick screen, on the upper-cased text: most text holds none of these words, and the full
# patterns cost far more than a few substring searches.
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "SK-", "BEARER ")


def mask_unknown_secrets(text: str) -> str:
    """Text from elsewhere with every value that looks like a secret masked."""
    upper = text.upper()
    if not any(word in upper for word in _SECRET_WORDS):
        return text
    text = _SECRET_ASSIGNMENT.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{MASK}", text)
    return _SECRET_SHAPE.sub(MASK, text)


def secret_values_of(environ: Mapping[str, str]) -> list[str]:
    """Values of secret-named variables, and the password of any URL among the values."""
    named = [v for k, v in environ.items() if SECRET_NAME.search(k)]
    return named + [p for p in map(url_password, environ.values()) if p]


def url_password(value: str) -> str | None:
    if "://" not in value or "@" not in value:
        return None
    try:
        return urllib.parse.unquote(urllib.parse.urlsplit(value.strip()).password or "") or None
    except ValueError:
        return None


def known_secrets(*extra: str | None, environ: Mapping[str, str] | None = None) -> Masker:
    """Secrets of the harness's environment plus `extra` (an API key read from a file)."""
    env = os.environ if environ is None else environ
    return Masker().add(*secret_values_of(env), *extra)
