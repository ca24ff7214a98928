"""Terminal-Bench 1.x runs → one levelfield run (`levelfield import tb1 PATH... --out RUN`).

TB1 writes a run-level `results.json` ({results: [trial...], accuracy}) in each run folder, and a
per-trial `results.json` below it. Submissions on the public TB1 board come in four layouts: run
folders with per-trial files; task folders without a run folder (the submission is the run);
run-level files only; flat `<run>_results.json`. The run-level list is read wherever there is
one (it holds every trial the run's `accuracy` counts); per-trial files are read only for a run
with no run-level file.

Verdicts: `is_resolved` true is a pass (reward 1), false a failure (reward 0), null no reward. The
`failure_mode` is kept as the reason by one table below, with Harbor's import's precedence: a
graded verdict decides unless the mode is the agent's own failure and the tests did not pass.
A trial with no reward counts 0 in `score`, as TB1's `accuracy = n_resolved / trials` counts it.
Only the fields named here are stored: `username`, `output_path`, paths and agent kwargs never.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from levelfield.errors import InputError
from levelfield.outcome import outcome_of
from levelfield.plan import trial_key
from levelfield.records import UNCLASSIFIED, Reason, TrialRecord
from levelfield.store import Store, row_of

IMPORTED_POLICY = "imported"
RUN_FILE = "results.json"
FLAT_SUFFIX = "_results.json"
NOTE = "imported from Terminal-Bench 1.x: reason from its failure_mode, no kernel evidence"

# TB1's FailureMode values → (reason, why). UNSET and NONE say nothing went wrong.
FAILURE_MODES: Final[dict[str, tuple[Reason, str]]] = {
    "agent_timeout": (Reason.AGENT_TIMEOUT, "the agent used up its time budget"),
    "context_length_exceeded": (Reason.AGENT_ERROR, "the agent outgrew its model's context"),
    "output_length_exceeded": (Reason.AGENT_ERROR, "the agent's model hit its output limit"),
    "fatal_llm_parse_error": (Reason.AGENT_ERROR, "the agent could not parse its model's reply"),
    "test_timeout": (Reason.VERIFIER_TIMEOUT, "the tests did not finish"),
    "parse_error": (Reason.VERIFIER_ERROR, "the harness could not parse the tests' output"),
    "agent_installation_failed": (Reason.AGENT_SETUP_FAILED, "the agent's install failed"),
}
_QUIET = {"unset", "none", None}


@dataclass(frozen=True, slots=True)
class Tb1Import:
    run_dir: Path
    imported: int
    already_stored: int
    runs: dict[str, list[float]] = field(default_factory=dict)  # label → runs' own accuracy
    skipped: tuple[str, ...] = ()


def find_tb1(root: Path) -> list[str]:
    """TB1 result files under `root`."""
    return sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(root)
        for f in files
        if is_tb1_file(f)
    )


def is_tb1_file(name: str) -> bool:
    return name == RUN_FILE or name.endswith(FLAT_SUFFIX)


def tb1_folders(paths: Iterable[str]) -> list[str]:
    """The shallowest folders holding the TB1 result files among `paths` (the files another
    import walked past): what `import harbor` names, one line per submission."""
    folders: list[str] = []
    for path in sorted(p for p in paths if is_tb1_file(os.path.basename(p))):
        folder = os.path.dirname(path)
        if not any(folder == f or folder.startswith(f + os.sep) for f in folders):
            folders = [f for f in folders if not f.startswith(folder + os.sep)] + [folder]
    return sorted(folders)


def import_tb1(paths: Sequence[Path], out: Path, *, label: str | None = None) -> Tb1Import:
    records: list[TrialRecord] = []
    runs: dict[str, list[float]] = {}
    skipped: list[str] = []
    for path in paths:
        root = Path(path)
        if not root.is_dir():
            raise InputError(f"{root}: no such directory")
        records += _read_root(root, label, runs, skipped)
    if not records:
        raise InputError(f"{', '.join(map(str, paths))}: no Terminal-Bench 1.x results.json found")
    with Store.open_for_writing(out) as store:
        meta = store.meta()
        stored = store.stored_keys()
        run_id = meta.get("run_id") or f"tb1-{Path(paths[0]).resolve().name}"
        new = [r for r in records if r.trial_key not in stored]
        store.commit_rows(row_of(r.model_copy(update={"run_id": run_id})) for r in new)
        store.set_meta(
            {
                "run_id": run_id,
                "backend": "tb1",
                "enforcement": "unknown: Terminal-Bench 1.x records no limits",
                "concurrency": "unknown",
                "policies": {IMPORTED_POLICY: {}},
                "tb1_accuracy": {**meta.get("tb1_accuracy", {}), **runs},
            }
        )
    return Tb1Import(out, len(new), len(records) - len(new), runs, tuple(skipped))


def _load(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _read_root(
    root: Path, label: str | None, runs: dict[str, list[float]], skipped: list[str]
) -> list[TrialRecord]:
    run_files: list[tuple[str, str, dict[str, Any]]] = []  # (run dir or flat stem, file, data)
    trial_files: list[str] = []
    for path in find_tb1(root):
        try:
            data = _load(path)
        except (OSError, ValueError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            run = path[: -len(FLAT_SUFFIX)] if path.endswith(FLAT_SUFFIX) else os.path.dirname(path)
            run_files.append((run, path, data))
        elif isinstance(data, dict) and "trial_name" in data:
            trial_files.append(path)
        else:
            skipped.append(f"{path}: neither a TB1 run's nor a trial's results.json")
    run_dirs = [r for r, _, _ in run_files]
    inside = {r for r in run_dirs for o in run_dirs if r != o and r.startswith(o + os.sep)}
    depth = min((Path(r).relative_to(root).parts.__len__() for r in run_dirs), default=1)
    records: list[TrialRecord] = []
    for run, path, data in run_files:
        if run in inside:
            skipped.append(f"{path}: a run inside another run's folder: not read twice")
            continue
        name = _label(root, run, depth, label)
        runs.setdefault(name, []).append(float(data.get("accuracy") or 0.0))
        rel = os.path.relpath(run, root)
        records += [_record(t, name, rel) for t in data["results"] if isinstance(t, dict)]
    covered = [r + os.sep for r in run_dirs]
    for path in trial_files:
        if not any(path.startswith(c) for c in covered):
            run = os.path.dirname(os.path.dirname(os.path.dirname(path)))
            name = _label(root, run, depth, label)
            records.append(_record(_load(path), name, os.path.relpath(run, root)))
    return records


def _label(root: Path, run: str, depth: int, label: str | None) -> str:
    """A submission is the folder at the shallowest runs' level; a PATH holding runs is one."""
    if label:
        return label
    parts = Path(run).relative_to(root).parts
    return root.resolve().name if depth <= 1 or len(parts) < depth else parts[depth - 1]


def verdict(is_resolved: bool | None, failure_mode: str | None) -> tuple[Reason, str]:
    """The reason and why, by Harbor's import's precedence (`outcome._imported`)."""
    graded = {True: Reason.TESTS_PASSED, False: Reason.TESTS_FAILED}.get(is_resolved)  # type: ignore[call-overload]
    if failure_mode in _QUIET:
        return graded or Reason.VERIFIER_ERROR, "no failure_mode; is_resolved decides"
    reason, why = FAILURE_MODES.get(
        str(failure_mode), (Reason.HARNESS_ERROR, f"{UNCLASSIFIED}: TB1 says only {failure_mode}")
    )
    if graded is not None and (
        graded is Reason.TESTS_PASSED or outcome_of(reason).value != "failed"
    ):
        return graded, f"{failure_mode}: {why}; the graded is_resolved decides, the mode is kept"
    return reason, f"{failure_mode} → {reason.value}: {why}"


def _record(t: dict[str, Any], label: str, run: str) -> TrialRecord:
    resolved = t.get("is_resolved")
    reason, why = verdict(resolved, t.get("failure_mode"))
    notes = (why, NOTE) if why.startswith(UNCLASSIFIED) else (NOTE, why)
    started = _time(t.get("trial_started_at")) or datetime(1970, 1, 1, tzinfo=UTC)
    finished = _time(t.get("trial_ended_at")) or started
    task = str(t.get("task_id") or "unknown")
    return TrialRecord(
        trial_key=trial_key(task, label, IMPORTED_POLICY, 0, f"{run}/{t.get('trial_name')}"),
        run_id="",
        task=task,
        agent=label,
        policy=IMPORTED_POLICY,
        repeat=0,
        backend="tb1",
        outcome=outcome_of(reason),
        reason=reason,
        reward=None if resolved is None else float(bool(resolved)),
        error=None if t.get("failure_mode") in _QUIET else str(t.get("failure_mode")),
        limits={},
        evidence={"notes": notes},
        telemetry={"host": _host(started)},
        started_at=started.isoformat(),
        finished_at=finished.isoformat(),
        duration_s=(finished - started).total_seconds(),
    )


def _host(started: datetime) -> dict[str, Any]:
    return {
        "host_id": "tb1",
        "started_at": started.isoformat(),
        "local_hour": started.hour,
        "free_memory_bytes": 0,
        "trials_in_flight": 0,
    }


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
