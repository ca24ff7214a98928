"""Tokens and dollars per trial: the price table, a record priced as it is committed to a real
SQLite store, the sweep's cost per configuration, and bad input to the adaptive options."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from levelfield.analysis.spend import sweep_cost
from levelfield.analysis.table import load_run
from levelfield.errors import RunConfigError
from levelfield.model_api.cost import PricingStore, load_prices, model_of, priced
from levelfield.records import ApiCall
from levelfield.store import Store

from ..conftest import MakeTask
from .test_store import record


def _call(tokens_in: int | None, tokens_out: int | None, outcome: str = "ok") -> ApiCall:
    return ApiCall(
        started_at="t",
        latency_s=0.1,
        attempt=1,
        status=200,
        outcome=outcome,  # type: ignore[arg-type]
        tokens_in=tokens_in,
        tokens_out=tokens_out,
    )


def test_the_shipped_table_prices_known_models_and_ignores_a_provider_prefix() -> None:
    table = load_prices()
    assert table.price_of("claude-sonnet-4-5") == table.price_of("anthropic/claude-sonnet-4-5")
    assert table.price_of("claude-sonnet-4-5").input == 3.0  # type: ignore[union-attr]
    assert table.price_of("no-such-model") is None


def test_a_misspelt_price_table_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text('[models."m"]\ninput = 1.0\nouptut = 2.0\n')
    with pytest.raises(RunConfigError, match="ouptut"):
        load_prices(bad)


def test_a_trial_is_priced_from_its_calls_worked_example(tmp_path: Path) -> None:
    # 1200 + 800 tokens in at $3/M, 300 + 0 out at $15/M: 0.006 + 0.0045 = $0.0105.
    prices = tmp_path / "p.toml"
    prices.write_text('[models."m"]\ninput = 3.0\noutput = 15.0\n')
    calls = (_call(1200, 300), _call(None, None, "rate_limited"), _call(800, 0))
    trial = record("k1").model_copy(update={"agent": "terminal:m", "api_calls": calls})
    out = priced(trial, load_prices(prices), None)
    assert (out.tokens_in, out.tokens_out) == (2000, 300)
    assert out.cost_usd == pytest.approx(0.0105)
    unpriced = priced(trial.model_copy(update={"agent": "terminal:x"}), load_prices(prices), None)
    assert unpriced.tokens_in == 2000 and unpriced.cost_usd is None
    assert priced(record("k2"), load_prices(prices), None).tokens_in is None  # no model calls
    assert model_of("oracle", None) is None and model_of("codex:gpt-5", None) == "gpt-5"


def test_committed_records_carry_their_cost_into_the_sweep_cost(tmp_path: Path) -> None:
    prices = tmp_path / "p.toml"
    prices.write_text('[models."m"]\ninput = 1.0\noutput = 10.0\n')
    table = load_prices(prices)
    with Store.open_for_writing(tmp_path / "run") as store:
        pricing = PricingStore(store, table, "m")
        for i, policy in enumerate(["strict", "strict", "headroom"]):
            trial = record(f"k{i}").model_copy(
                update={"agent": "terminal:m", "policy": policy, "api_calls": (_call(1000, 100),)}
            )
            pricing.commit(trial)
        assert pricing.count() == 3
    cost = sweep_cost(load_run(tmp_path / "run").trials)
    assert cost is not None
    by_policy = {c.labels["policy"]: c for c in cost.configs}
    assert by_policy["strict"].cost_usd == pytest.approx(2 * 0.002)
    assert by_policy["headroom"].tokens_in == 1000
    assert cost.total_usd == pytest.approx(3 * 0.002) and cost.n_trials == 3


def test_unpriced_tokens_leave_the_cost_unknown_not_zero(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path / "run") as store:
        trial = record("k").model_copy(update={"agent": "terminal:x", "api_calls": (_call(5, 5),)})
        PricingStore(store, load_prices(), None).commit(trial)
    cost = sweep_cost(load_run(tmp_path / "run").trials)
    assert cost is not None and math.isnan(cost.total_usd) and cost.tokens_in == 5


def test_adaptive_options_refuse_bad_input(make_task: MakeTask, tmp_path: Path) -> None:
    root = make_task()

    def sweep(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "levelfield", "sweep", str(root.parent), "--policies",
             "strict,uncapped", "--out", str(tmp_path / "s"), *extra],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    bad = sweep("--target-ci", "2pp", "--target", "diff:strict-huge")
    assert bad.returncode == 2 and "'huge' names 0 configurations" in bad.stderr
    small = sweep("--target-ci", "2pp", "--max-trials", "3")
    assert small.returncode == 2 and "does not cover the pilot" in small.stderr
    assert "Traceback" not in bad.stderr + small.stderr
