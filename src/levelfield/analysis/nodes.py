"""Trial table → each node's health readings, and the nodes far off the others.

A node whose trials met much more CPU, memory or I/O stall, steal or admission wait than the
other nodes' trials did is one whose failures may be the host's, not the agent's: the report
flags it so that its trials can be looked at (or rerun) before a score is read. Per node the
median over its trials is taken (robust to a few outliers); a node is flagged on a reading when
its median exceeds the median of the other nodes' medians by more than FAR_ABSOLUTE of that
reading's unit *and* by more than FAR_FACTOR times: both, so that neither a 0.1-point wobble on
healthy hosts nor a small rise on a busy cluster counts. Needs two nodes or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

READINGS = (
    "cpu_pressure_pct",
    "memory_pressure_pct",
    "io_pressure_pct",
    "steal_pct",
    "admission_wait_s",
)
FAR_ABSOLUTE = {
    "cpu_pressure_pct": 10.0,
    "memory_pressure_pct": 5.0,
    "io_pressure_pct": 10.0,
    "steal_pct": 5.0,
    "admission_wait_s": 30.0,
}
FAR_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class NodeHealth:
    node: str
    n_trials: int
    medians: dict[str, float]  # reading → median over the node's trials (NaN: not recorded)
    flags: tuple[str, ...]  # "cpu_pressure_pct 42.0 vs 3.1 on the others"


def node_health(trials: pd.DataFrame) -> tuple[NodeHealth, ...]:
    """One entry per node with health readings; empty when the table has none."""
    present = [r for r in READINGS if r in trials.columns]
    if "node" not in trials.columns or not present:
        return ()
    frame = trials[["node", *present]].copy()
    frame[present] = frame[present].apply(pd.to_numeric, errors="coerce")
    frame = frame.dropna(subset=["node"])
    if frame[present].isna().all().all():
        return ()
    medians = frame.groupby("node", sort=True)[present].median()
    counts = frame.groupby("node", sort=True).size()
    return tuple(
        NodeHealth(
            node=str(node),
            n_trials=int(counts[node]),
            medians={r: float(medians.at[node, r]) for r in present},
            flags=_flags(medians, node, present),
        )
        for node in medians.index
    )


def _flags(medians: pd.DataFrame, node: object, present: list[str]) -> tuple[str, ...]:
    others = medians.drop(index=node)
    if others.empty:
        return ()
    flags = []
    for reading in present:
        mine, values = float(medians.at[node, reading]), others[reading].dropna().to_numpy(float)
        if math.isnan(mine) or values.size == 0:
            continue
        rest = float(np.median(values))
        if mine - rest > FAR_ABSOLUTE[reading] and mine > FAR_FACTOR * rest:
            flags.append(f"{reading} {mine:.3g} vs {rest:.3g} on the others")
    return tuple(flags)
