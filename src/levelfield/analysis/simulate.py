"""Seeded synthetic sweeps with a known truth, in the tidy-table shape.

For checking estimators (does the CI cover the true rate?), for the benchmark, and for planning a
sweep before paying for it. The model follows docs/design.md's story: each task has a difficulty and
a memory need (a multiple of its spec); on each trial the agent may pick a heavier strategy that
solves more but needs HEAVY_FACTOR times the memory; a trial whose peak exceeds the policy's memory
ceiling is OOM-killed (an infra error), and a small share of trials die of the sandbox regardless.
Tightening the ceiling therefore both adds infra errors and removes the heavy strategy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

SWEEP: Mapping[str, float] = {"strict": 1.0, "headroom": 3.0, "uncapped": math.inf}
HEAVY_FACTOR = 2.5  # e.g. pandas + networkx + scikit-learn against a stdlib-only solution
HEAVY_BONUS = 1.5  # log-odds of passing gained by the heavy strategy
SANDBOX_ERROR_RATE = 0.01
SPEC_BYTES = 2 << 30


def true_pass_probability(base_logit: np.ndarray, heavy: np.ndarray) -> np.ndarray:
    """Per-trial probability of passing given that the trial was not killed."""
    return 1 / (1 + np.exp(-(base_logit + HEAVY_BONUS * heavy)))


def simulate_trials(
    *,
    n_tasks: int = 50,
    agents: Sequence[str] = ("oracle",),
    policies: Mapping[str, float] = SWEEP,
    repeats: int = 3,
    seed: int = 0,
    telemetry: bool = True,
) -> pd.DataFrame:
    """One row per trial (task × agent × policy × repeat). `policies` maps a name to its memory
    ceiling multiple (inf = uncapped). `telemetry=False` leaves out the optional columns."""
    rng = np.random.default_rng(seed)
    shape = (n_tasks, len(agents), len(policies), repeats)
    n = math.prod(shape)
    t, a, p, r = (ix.ravel() for ix in np.indices(shape))
    difficulty = rng.normal(0.0, 1.5, n_tasks)
    need = np.exp(rng.normal(-1.0, 0.5, n_tasks))  # peak of the light strategy / spec
    heavy_share = rng.beta(1, 2, n_tasks)
    skill = np.linspace(0.0, -0.5, len(agents))
    ceiling = np.array(list(policies.values()), float)[p]
    heavy = rng.random(n) < heavy_share[t]
    peak = need[t] * np.where(heavy, HEAVY_FACTOR, 1.0) * np.exp(rng.normal(0, 0.1, n))
    killed = peak > ceiling
    broken = rng.random(n) < SANDBOX_ERROR_RATE
    passed = rng.random(n) < true_pass_probability(difficulty[t] + skill[a], heavy)
    status = np.where(killed | broken, "infra_error", np.where(passed, "passed", "failed"))
    reason = np.where(
        killed,
        "oom_killed",
        np.where(broken, "sandbox_error", np.where(passed, "tests_passed", "tests_failed")),
    )
    frame = pd.DataFrame(
        {
            "task": pd.Categorical.from_codes(t, [f"task-{i:04d}" for i in range(n_tasks)]),
            "agent": pd.Categorical.from_codes(a, list(agents)),
            "policy": pd.Categorical.from_codes(p, list(policies)),
            "repeat": r,
            "status": status,
            "reason": reason,
        }
    )
    if telemetry:
        frame = frame.assign(**_telemetry(rng, n, ceiling, np.minimum(peak, ceiling), killed))
    return frame


def _telemetry(
    rng: np.random.Generator, n: int, ceiling: np.ndarray, peak: np.ndarray, killed: np.ndarray
) -> dict[str, object]:
    """Optional columns; the host variables are independent of the outcome by construction."""
    return {
        "memory_ceiling_multiple": ceiling,
        "memory_floor_multiple": np.ones(n),
        "memory_spec_bytes": np.full(n, SPEC_BYTES),
        "peak_memory_bytes": peak * SPEC_BYTES,
        "oom_kills": killed.astype(int),
        "cpu_throttled_s": rng.exponential(2.0, n),
        "duration_s": rng.gamma(4.0, 30.0, n),
        "local_hour": rng.integers(0, 24, n),
        "trials_in_flight": rng.integers(1, 9, n),
        "host_load1": rng.gamma(4.0, 0.5, n),
        "host_id": "sim-host",
        "backend": "simulated",
        "concurrency": 8,
    }
