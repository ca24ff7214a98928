"""Model API calls → tokens and dollars per trial, from a price table the user can edit.

A trial's tokens are the sum over its recorded API calls (the `terminal` agent's own client, or a
recording proxy in front of a CLI agent: both give `ApiCall.tokens_in/out`). Its cost is
tokens × the model's price per million tokens from `--prices` (default: `prices.toml` shipped in
this package). A model missing from the table leaves the cost unknown (None), never 0: a sweep
that looks free because its model was not priced would mislead more than a blank.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from levelfield.errors import RunConfigError
from levelfield.records import ApiCall, TrialRecord

MODEL_AGENTS = ("terminal", "claude-code", "codex")  # agent labels that end in their model
# A dated snapshot of a listed model costs what the model costs: claude-sonnet-4-5-20250929,
# gpt-5-2025-08-07, claude-sonnet-4-5@20250929 (Vertex), gpt-4.1-latest.
SNAPSHOT = re.compile(r"(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2})|-latest)$")


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float = Field(ge=0, description="US dollars per million input tokens.")
    output: float = Field(ge=0, description="US dollars per million output tokens.")


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    models: dict[str, Price] = Field(default_factory=dict)

    def price_of(self, model: str | None) -> Price | None:
        """The model's price: by its name, without a provider prefix (openai/gpt-5), or, for a
        dated snapshot, by the name it is a snapshot of."""
        if not model:
            return None
        for name in (model, model.partition("/")[2] or model):
            price = self.models.get(name) or self.models.get(SNAPSHOT.sub("", name))
            if price is not None:
                return price
        return None


def load_prices(path: Path | None = None) -> PriceTable:
    """The table at `path`, or the default one shipped with levelfield."""
    try:
        text = (
            path.read_text()
            if path is not None
            else resources.files("levelfield.model_api").joinpath("prices.toml").read_text()
        )
        return PriceTable.model_validate(tomllib.loads(text))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise RunConfigError(f"price table {path or 'prices.toml'}: {exc}") from exc


def tokens_of(calls: tuple[ApiCall, ...]) -> tuple[int | None, int | None]:
    """Summed input and output tokens; None when no call reported any (not a model agent)."""
    ins = [c.tokens_in for c in calls if c.tokens_in is not None]
    outs = [c.tokens_out for c in calls if c.tokens_out is not None]
    return (sum(ins) if ins else None, sum(outs) if outs else None)


def model_of(agent: str, model: str | None) -> str | None:
    """The model a trial's calls went to: the --model given, else the agent label's suffix."""
    kind, _, suffix = agent.partition(":")
    return model or (suffix if kind in MODEL_AGENTS and suffix else None)


def priced(record: TrialRecord, table: PriceTable, model: str | None) -> TrialRecord:
    """The record with its tokens and, when its model has a price, its cost in dollars."""
    tokens_in, tokens_out = tokens_of(record.api_calls)
    if tokens_in is None and tokens_out is None:
        return record
    price = table.price_of(model_of(record.agent, model))
    cost = None
    if price is not None:
        cost = ((tokens_in or 0) * price.input + (tokens_out or 0) * price.output) / 1e6
    return record.model_copy(
        update={"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": cost}
    )


class PricingStore:
    """The run's store, pricing each record as it is committed: both executors (local and Ray)
    commit every trial through here, so each stored record carries its cost."""

    def __init__(self, store: Any, table: PriceTable, model: str | None) -> None:
        self._store, self._table, self._model = store, table, model

    def commit(self, record: TrialRecord) -> None:
        self._store.commit(priced(record, self._table, self._model))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
