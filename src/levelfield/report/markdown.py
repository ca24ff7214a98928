"""Run summary → a Markdown disclosure card: what a score needs beside it to be comparable.

The card states the resource policy (floor, ceiling, how the kernel enforced it, which backend),
the capabilities the agent held, the model budget per trial, the model tools and features
the proxy relayed per provider, the host, concurrency, time span,
harness version and trials per task, then the score under both conventions with its CI.
Anything the run did not record prints as "unknown", never as a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from levelfield.analysis.summary import RunSummary
from levelfield.records import ModelBudget
from levelfield.report import _format as f

RESOURCES = ("memory", "cpus", "storage")


def render_card(summary: RunSummary) -> str:
    info, prov = summary.info, summary.provenance
    backend = f.info_value(info, "backend")
    if backend == "unknown" and prov.backends:
        backend = ", ".join(prov.backends)
    elif backend == "auto" and prov.backends:
        backend = f"auto: {', '.join(prov.backends)}"
    lines = [
        f"# Disclosure card: run {f.info_value(info, 'run_id')}",
        "",
        "| | |",
        "|---|---|",
        f"| harness | levelfield {f.info_value(info, 'harness_version')} |",
        f"| backend | {backend} |",
        f"| enforcement | {f.info_value(info, 'enforcement')} |",
        f"| agent's capabilities | {f.info_value(info, 'capabilities')} |",
        f"| host | {_host(info, prov.hosts)} |",
        f"| concurrency | {_concurrency(info, prov.concurrency)} |",
        f"| time span (UTC) | {_span(info, prov.first_started_at, prov.last_started_at)} |",
        f"| images | {_images(info, prov.images)} |",
        f"| model budget per trial | {model_budget(info)} |",
        f"| model tools and features relayed | {_model_features(info)} |",
        f"| trials per task | {_repeats(summary)} |",
        f"| statistics | {round(100 * summary.level)} % CI, task-clustered SE (Miller 2024); "
        f"bootstrap {summary.n_resamples}× seed {summary.seed} |",
        "",
        *_drift(prov.image_drift),
        "## Resource policy",
        "",
        *_policies(summary),
        "",
        "## Scores",
        "",
        "`score` counts infra errors as failures (leaderboard convention); `clean score` leaves "
        "them out. Points, with CI.",
        "",
        "| configuration | ceiling | tasks | trials | score | clean score | infra error rate |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for c in summary.configs:
        lines.append(
            f"| {f.label(c)} | {f.ceiling(c.ceiling)} | {c.n_tasks} | {c.n_trials} | "
            f"{f.metric(c.score)} | {f.metric(c.clean_score)} | {f.metric(c.infra_error_rate)} |"
        )
    return "\n".join(lines) + "\n"


def model_budget(info: Mapping[str, Any]) -> str:
    """The tokens and dollars a trial's model calls could spend: "none" when the run set no
    ceiling, "unknown" when it did not record one (an import, a run older than the budget)."""
    try:
        return ModelBudget.model_validate(info["budget"]).describe()
    except (KeyError, ValidationError):
        return "unknown"


def _model_features(info: Mapping[str, Any]) -> str:
    """What the proxy relayed per provider (server-side tools, storage, fan-out): a score under
    web search is another configuration than one without. "unknown" for a run that predates it."""
    features = info.get("model_features")
    if not isinstance(features, dict) or not features:
        return "unknown"
    return "; ".join(f"{provider}: {said}" for provider, said in sorted(features.items()))


def _drift(drift: tuple[str, ...]) -> list[str]:
    """A pinned tag that moved mid-run: the trials before and after ran different images."""
    if not drift:
        return [""]
    lines = ["", "**Image drift**: these tags pointed at another digest partway through the run:"]
    return [*lines, "", *(f"- {d}" for d in drift), ""]


def _policies(summary: RunSummary) -> list[str]:
    declared = summary.info.get("policies")
    rows = ["| policy | " + " | ".join(f"{r} floor | {r} ceiling" for r in RESOURCES) + " |"]
    rows.append("|---" * (1 + 2 * len(RESOURCES)) + "|")
    if isinstance(declared, Mapping) and declared:
        for name, spec in sorted(declared.items()):
            cells = [_bound(spec, r, b) for r in RESOURCES for b in ("floor", "ceiling")]
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
        return rows
    seen = {c.labels["policy"]: c.ceiling for c in summary.configs}
    for name, ceiling in seen.items():
        cells = ["unknown", f.ceiling(ceiling)] + ["unknown"] * 2 * (len(RESOURCES) - 1)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def _bound(spec: Any, resource: str, bound: str) -> str:
    """`None` for a ceiling means uncapped; a missing key means the run did not record it."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get(resource), Mapping):
        return "unknown"
    values = spec[resource]
    if bound not in values:
        return "unknown"
    value = values[bound]
    return ("none" if bound == "ceiling" else "unknown") if value is None else str(value)


def _host(info: Mapping[str, Any], hosts: tuple[str, ...]) -> str:
    host = info.get("host")
    if isinstance(host, Mapping) and host:
        return (
            f"{f.info_value(host, 'host_id')}, {f.info_value(host, 'cpus')} CPUs, "
            f"{f.gib(host.get('memory_bytes'))}, kernel {f.info_value(host, 'kernel')}"
        )
    return ", ".join(hosts) if hosts else "unknown"


def _concurrency(info: Mapping[str, Any], seen: tuple[int, ...]) -> str:
    declared = f.info_value(info, "concurrency")
    if declared != "unknown":
        return declared
    return ", ".join(map(str, seen)) if seen else "unknown"


def _span(info: Mapping[str, Any], first: str | None, last: str | None) -> str:
    start = f.info_value(info, "started_at")
    end = f.info_value(info, "finished_at")
    start = first if start == "unknown" and first else start
    end = last if end == "unknown" and last else end
    return f"{start} – {end}"


def _images(info: Mapping[str, Any], seen: tuple[str, ...]) -> str:
    """Trials that name no image ran on the host's userland, unless the run says otherwise
    (an import, whose harness's images are not in its trial results)."""
    return ", ".join(seen) or str(info.get("images") or "none (host userland)")


def _repeats(summary: RunSummary) -> str:
    if not summary.configs:
        return "unknown"
    low = min(c.repeats[0] for c in summary.configs)
    high = max(c.repeats[1] for c in summary.configs)
    return str(low) if low == high else f"{low}–{high}"
