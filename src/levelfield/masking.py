"""Secrets stay secret even when an agent prints them: every secret value levelfield knows is
masked in every file of a trial's directory and in the record before the store sees it, the way
CI systems mask secrets in build logs.

Known values: the agent's API key (from its variable or its file) and the value of every variable
of the harness's environment whose name says it holds a secret (…_API_KEY, …_TOKEN, …_SECRET,
…PASSWORD). Values shorter than MIN_SECRET_CHARS are left alone: masking "1" would mask every
digit of a log and protect nothing. Logs are plain text while a trial runs and masked when it
ends; a trial directory that a killed run left is discarded by the resume before anything reads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

MASK = "***"
MIN_SECRET_CHARS = 8
SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


@dataclass
class Masker:
    """The secret values of one run; `add` takes more (a per-trial token, for instance)."""

    values: set[str] = field(default_factory=set)

    def add(self, *values: str | None) -> Masker:
        for value in values:
            if value and len(value) >= MIN_SECRET_CHARS:
                self.values.add(value)
        return self

    def _ordered(self) -> list[str]:
        return sorted(self.values, key=len, reverse=True)  # a key that contains another first

    def text(self, text: str) -> str:
        for value in self._ordered():
            text = text.replace(value, MASK)
        return text

    def data(self, raw: bytes) -> bytes:
        for value in self._ordered():
            raw = raw.replace(value.encode(), MASK.encode())
        return raw

    def record(self, model: M) -> M:
        """A stored model with every string value masked (field names are never touched, so a
        secret that happens to equal one cannot break the record)."""
        if not self.values:
            return model
        dumped = model.model_dump(mode="json")
        masked = self._walk(dumped)
        return model if masked == dumped else type(model).model_validate(masked)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        return value

    def files(self, root: Path) -> int:
        """Rewrite every regular file under `root` that holds a secret; returns how many."""
        if not self.values or not root.exists():
            return 0
        changed = 0
        for path in _regular_files(root):
            try:
                raw = path.read_bytes()
            except OSError:
                continue
            masked = self.data(raw)
            if masked != raw:
                path.write_bytes(masked)
                changed += 1
        return changed


def _regular_files(root: Path) -> Iterable[Path]:
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path


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
    return [v for k, v in environ.items() if SECRET_NAME.search(k)]


def known_secrets(*extra: str | None, environ: Mapping[str, str] | None = None) -> Masker:
    """Secrets of the harness's environment plus `extra` (an API key read from a file)."""
    env = os.environ if environ is None else environ
    return Masker().add(*secret_values_of(env), *extra)
