"""Harbor jobs, submissions and leaderboards → one levelfield run (`import_harbor`).

Every trial becomes a record whose `agent` is its submission's label, so that each analysis
(summary, paired comparison, power) treats submissions as configurations; the policy is
`imported`, since nobody knows what limits the submitter's sandboxes enforced (the reports say
"unknown", never "none"). The reason comes from Harbor's exception and the graded reward
(`reasons.py`), and what Harbor wrote is kept in the record's `harbor` facts. Task names are
normalised so that `terminal-bench/x` pairs with `x`.

Importing again is idempotent: a trial's key derives from its label and its job and trial folder
names. The whole import is committed in one transaction: it reads files that stay where they are,
so an interrupted import loses nothing and is simply run again.

Every result.json found is accounted for: a trial imported (or stored already), a job's summary,
or skipped with its reason (unreadable, not a trial's, a second trial of the same label, job and
folder). A folder not read is named too (a symlink to a folder read already, a broken link).
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json, to_json

from levelfield.errors import InputError
from levelfield.harbor import layout
from levelfield.harbor.beside import read_beside, with_beside
from levelfield.harbor.flags import Flag, flag_submissions
from levelfield.harbor.reasons import judge, unreadable_verdict
from levelfield.harbor.trial_file import (
    RESULT_NAME,
    HarborTrial,
    JobSummary,
    NotATrial,
    read_trial,
    seconds_between,
    trial_prefix,
    unreadable_trial,
)
from levelfield.plan import trial_key
from levelfield.records import DEFAULT_WINDOW, Outcome, Reason, TrialRecord
from levelfield.store import Row, Store, row_of, without_cycle_collection
from levelfield.tb1 import tb1_folders

IMPORTED_POLICY = "imported"
# An enum member's lookup and its `.value` cost, per trial: the records are written with the
# values, and the one member compared is looked up once.
_VALUE = {member: member.value for member in (*Outcome, *Reason)}
_VERIFIER_TIMEOUT = Reason.VERIFIER_TIMEOUT
ENFORCEMENT = "unknown: imported from Harbor, whose sandboxes' limits were not recorded"


@dataclass(frozen=True, slots=True)
class Labelled:
    trial: HarborTrial
    label: str
    within: str  # job/trial below the submission folder: the trial's identity in it
    job: str


@dataclass(frozen=True, slots=True)
class ImportResult:
    """`found` result.json files = `imported` + `already_stored` + `job_summaries` + the
    `skipped` ones (each "path: why"); `folders_skipped` are folders not read, with why."""

    run_dir: Path
    imported: int
    already_stored: int
    skipped: tuple[str, ...]
    submissions: dict[str, int] = field(default_factory=dict)  # label → trials found
    flags: dict[str, list[Flag]] = field(default_factory=dict)
    found: int = 0
    job_summaries: int = 0
    folders_skipped: tuple[str, ...] = ()
    submissions_skipped: dict[str, str] = field(default_factory=dict)  # folder → why
    # The records stored, as stored, when they are the run's whole content (a new run): its
    # table is built from them (analysis.table.prepare) instead of reading them back.
    documents: list[dict[str, Any]] = field(default_factory=list, repr=False)


@dataclass(slots=True)
class _Tally:
    """What became of every result.json found, and of the folders not read."""

    found: int = 0
    job_summaries: int = 0
    skipped: list[str] = field(default_factory=list)
    folders_skipped: list[str] = field(default_factory=list)
    outcome: Counter[str] = field(default_factory=Counter)  # "new", "already"
    summary_dirs: set[str] = field(default_factory=set)  # folders of the job summaries
    # the new records, as stored, kept only when they are the whole run (nothing stored before)
    documents: list[dict[str, Any]] = field(default_factory=list)
    other_files: list[str] = field(default_factory=list)  # in folders that hold no trial
    submissions_skipped: dict[str, str] = field(default_factory=dict)  # folder → why


def import_harbor(
    paths: Sequence[Path],
    out: Path,
    *,
    label: str | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Every trial under `paths` into the run at `out`. `on_progress` gets the number of trial
    folders read so far, every few hundred."""
    layout.check_label(list(paths), label)
    check_paths(paths)
    tally = _Tally()
    with without_cycle_collection():
        found = [t for p in paths for t in _read_path(Path(p), label, tally, on_progress)]
        tb1 = tb1_folders(tally.other_files)
        if not found:
            where = ", ".join(map(str, paths))
            if tb1:
                raise InputError(
                    f"{where}: no Harbor trial result.json found, but {len(tb1)} Terminal-Bench "
                    f"1.x result folders (e.g. {tb1[0]}): use `levelfield import tb1 {where}`"
                )
            raise InputError(f"{where}: no Harbor trial result.json found")
        tally.folders_skipped += [
            f"{f}: a folder of Terminal-Bench 1.x results: use `levelfield import tb1`" for f in tb1
        ]
        found = _unreadable_tasks(found)
        by_label: dict[str, list[HarborTrial]] = defaultdict(list)
        jobs: dict[str, list[str]] = defaultdict(list)
        for item in found:
            by_label[item.label].append(item.trial)
            jobs[item.label].append(item.job)
        flags = flag_submissions(by_label, jobs)
        with Store.open_for_writing(out) as store:
            meta = store.meta()
            run_id = meta.get("run_id") or _run_id(paths, by_label)
            stored = store.stored_keys()
            store.commit_rows(_new_rows(found, run_id, stored, tally))
            store.set_meta(_meta(meta, run_id, paths, set(by_label), flags, tally))
    return ImportResult(
        out,
        tally.outcome["new"],
        tally.outcome["already"],
        tuple(tally.skipped),
        {k: len(v) for k, v in by_label.items()},
        flags,
        tally.found,
        tally.job_summaries,
        tuple(tally.folders_skipped),
        dict(tally.submissions_skipped),
        tally.documents,
    )


def check_paths(paths: Sequence[Path]) -> None:
    """The same folder twice, or one inside another, would read its trials twice: refused
    before anything is read, in the user's words."""
    resolved = [Path(p).resolve() for p in paths]
    for i, inner in enumerate(resolved):
        for j, outer in enumerate(resolved):
            if i == j:
                continue
            if inner == outer and j < i:
                raise InputError(
                    f"{paths[i]} is given twice (as {paths[j]} and {paths[i]}): each trial is "
                    "imported once, give the folder once"
                )
            if outer in inner.parents:
                raise InputError(
                    f"{paths[i]} lies inside {paths[j]}, which is imported whole: give one of "
                    "them, or its trials would be read twice under two labels"
                )


def import_harbor_job(job_dir: Path, out: Path) -> ImportResult:
    """One Harbor job folder (the import's first form; kept for the library's callers)."""
    return import_harbor([job_dir], out)


def _read_path(
    root: Path,
    label: str | None,
    tally: _Tally,
    on_progress: Callable[[int], None] | None,
) -> list[Labelled]:
    if not root.is_dir():
        raise InputError(f"{root}: {'not a directory' if root.exists() else 'no such directory'}")

    def read(trial_dir: str, subdirs: list[str]) -> HarborTrial | None:
        tally.found += 1
        if on_progress is not None and tally.found % 500 == 0:
            on_progress(tally.found)
        try:
            trial = read_trial(trial_dir)
        except JobSummary:
            tally.job_summaries += 1
            tally.summary_dirs.add(trial_dir)
            return None
        except NotATrial as exc:
            tally.skipped.append(f"{os.path.join(trial_dir, RESULT_NAME)}: {exc}")
            return None
        except (OSError, ValueError) as exc:  # json's errors are ValueErrors
            why = f"{type(exc).__name__}: {exc}"
            kept = unreadable_trial(trial_dir, why)
            if kept is None:
                tally.skipped.append(f"{os.path.join(trial_dir, RESULT_NAME)}: {why}")
            return kept
        beside = read_beside(trial_dir, trial, subdirs)
        return trial if beside is None else dataclasses.replace(trial, beside=beside)

    def skip(folder: str, why: str) -> None:
        tally.folders_skipped.append(f"{folder}: {why}")

    found = list(layout.walk_trials(root, read, skip, tally.other_files))
    if not found:
        return []
    shape = layout.shape_of(found)
    layout.check_label_fits(shape, root, label)
    for folder in layout.folders_without_trials(root, shape, found):
        tally.submissions_skipped[folder] = _why_no_trials(folder, tally.summary_dirs)
    place_of = layout.placer(root, shape, label)
    labelled = []
    for f in found:
        place = place_of(f.parts)
        name = place.submission or _harbor_agent(f.trial)
        labelled.append(Labelled(f.trial, name, place.within, place.job))
    return labelled


def _why_no_trials(folder: str, summary_dirs: set[str]) -> str:
    """What a submission folder that gave no trial holds instead, in a few words."""
    kinds: Counter[str] = Counter()
    results = summaries = 0
    for where, _, names in os.walk(folder):
        for name in names:
            if name == RESULT_NAME:
                results += 1
                summaries += where in summary_dirs
            else:
                kinds[os.path.splitext(name)[1] or name] += 1
    if not results and not kinds:
        return "an empty folder: no trial"
    if results and results == summaries:
        what = "a job's summary" if summaries == 1 else f"{summaries} job summaries"
        return f"only {what}, no trial folder" + (f" (and {_kinds(kinds)})" if kinds else "")
    if results:
        return (
            f"{results - summaries} result.json that are no trial's (skipped, each named above)"
            + (f" and {_kinds(kinds)}" if kinds else "")
        )
    return f"no Harbor result.json: {_kinds(kinds)} of another format"


def _kinds(kinds: Counter[str]) -> str:
    total = kinds.total()
    ordered = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))  # not the walk's order
    shown = ", ".join(f"{kind} {n}" for kind, n in ordered[:4])
    more = ", …" if len(kinds) > 4 else ""
    return f"{total} file{'s' * (total != 1)} ({shown}{more})"


def _unreadable_tasks(found: list[Labelled]) -> list[Labelled]:
    """An unreadable trial's task is known only from its folder's name, whose task part Harbor
    cuts at 32 characters: the full name of a task whose readable trials' folders (in the same
    submission, else anywhere) share that part."""
    if not any(item.trial.unreadable for item in found):
        return found
    own: dict[tuple[str, str], set[str]] = defaultdict(set)
    anywhere: dict[str, set[str]] = defaultdict(set)
    for item in found:
        if item.trial.unreadable is None:
            prefix = trial_prefix(item.trial.facts["trial_name"])
            if prefix is not None:
                own[(item.label, prefix)].add(item.trial.task)
                anywhere[prefix].add(item.trial.task)
    out = []
    for item in found:
        prefix = trial_prefix(item.trial.facts["trial_name"]) if item.trial.unreadable else None
        tasks = own.get((item.label, prefix or "")) or anywhere.get(prefix or "") or set()
        if len(tasks) == 1:
            task = next(iter(tasks))
            facts = {**item.trial.facts, "task_name": task}
            item = dataclasses.replace(
                item, trial=dataclasses.replace(item.trial, task=task, facts=facts)
            )
        out.append(item)
    return out


def _harbor_agent(trial: HarborTrial) -> str:
    """A job without a submission folder is named by its agent, as Harbor's own reports do."""
    name, model = trial.facts["agent_name"] or "unknown", trial.facts["model"]
    return f"{name}:{model}" if model else name


def _new_rows(found: list[Labelled], run_id: str, stored: set[str], tally: _Tally) -> Iterator[Row]:
    """Store rows of the trials not stored yet, one at a time (the store writes each as it
    comes); `tally` counts the new and the already stored. Repeats are numbered per
    (submission, task, policy) in start order, as Harbor's attempts were.

    What came from the file (`harbor`) is of HarborFacts' types by construction
    (trial_file._facts), and the rest of each record is built here from values of known types,
    so it is written as JSON without building a TrialRecord: that would cost as much again as
    parsing the file. tests/integration/test_leaderboard_import.py reads every record of the
    shared leaderboard back through the store. A trial with something beside its result.json (a
    levelfield record, a kill in its agent log) is rare and carries fields from elsewhere: it is
    validated whole, and skipped with its problem if it does not validate. A second trial with
    the key of one read in this import (two paths whose submission, job and trial folders have
    the same names) is skipped with that reason."""
    groups: dict[tuple[str, str, str], list[Labelled]] = defaultdict(list)
    for item in found:
        groups[(item.label, item.trial.task, _policy(item.trial))].append(item)
    read_now: set[str] = set()
    for members in groups.values():
        timed = sorted(((_sortable(m.trial.started_at), m.within, m) for m in members), key=_first2)
        for repeat, (started_at, _, item) in enumerate(timed, 1):
            key = trial_key(item.trial.task, item.label, IMPORTED_POLICY, 0, item.within)
            if key in read_now:
                tally.skipped.append(
                    f"{item.label}/{item.within}: the same submission, job and trial folder "
                    "names as a trial read from another path: imported once"
                )
                continue
            read_now.add(key)
            if key in stored:
                tally.outcome["already"] += 1
                continue
            facts = item.trial.facts  # the trial's own dict: read once, stored once
            facts["submission"], facts["job"] = item.label, item.job
            try:
                plain = _fields(item, facts, key, run_id, repeat, started_at)
                fields = _with_beside(item.trial, plain)
                row = _row(plain) if fields is plain else _validated_row(fields)
            except ValidationError as exc:
                tally.skipped.append(f"{item.label}/{item.within}: {exc}")
                continue
            if not stored:
                tally.documents.append(plain if fields is plain else from_json(row.record))
            tally.outcome["new"] += 1
            yield row


def _validated_row(fields: dict[str, Any]) -> Row:
    return row_of(TrialRecord.model_validate(fields))


def _row(fields: dict[str, Any]) -> Row:
    return Row(
        fields["trial_key"],
        1,
        fields["task"],
        fields["agent"],
        fields["policy"],
        fields["repeat"],
        DEFAULT_WINDOW,
        fields["outcome"],
        fields["reason"],
        fields["started_at"],
        fields["finished_at"],
        to_json(fields).decode(),
    )


def _policy(trial: HarborTrial) -> str:
    """The levelfield policy a trial ran under on levelfield's environment, else `imported`."""
    record = trial.beside.record if trial.beside is not None else None
    return record.policy if record is not None else IMPORTED_POLICY


def _sortable(when: datetime | None) -> str:
    return when.isoformat() if when else ""


def _first2(keyed: tuple[str, str, Labelled]) -> tuple[str, str]:
    return keyed[0], keyed[1]


def _with_beside(trial: HarborTrial, fields: dict[str, Any]) -> dict[str, Any]:
    """The same dict when nothing beside result.json changes the record."""
    if trial.beside is None:
        return fields
    return with_beside(fields, trial.beside, trial.facts["exception_type"])


def _fields(
    item: Labelled,
    facts: dict[str, Any],
    key: str,
    run_id: str,
    repeat: int,
    started_at: str,
) -> dict[str, Any]:
    """The fields of a TrialRecord that differ from its defaults; `facts` are the trial file's,
    with its submission and job; `started_at` its start as `_sortable` wrote it ("" unknown)."""
    trial = item.trial
    record = trial.beside.record if trial.beside is not None else None
    verdict = (
        unreadable_verdict(trial.unreadable)
        if trial.unreadable is not None
        else judge(  # the one call of the one verdict function (outcome.decide) for this trial
            facts["exception_type"],
            facts["exception_message"],
            trial.reward,
            trial.reward_problem,
            evidence=record.evidence if record is not None else None,
        )
    )
    started = trial.started_at or trial.finished_at or datetime.now(UTC)
    finished = trial.finished_at or started
    started_at = started_at if trial.started_at else started.isoformat()
    phase_s = facts["phase_s"]
    return {
        "trial_key": key,
        "run_id": run_id,
        "task": trial.task,
        "agent": item.label,
        "policy": IMPORTED_POLICY,
        "repeat": repeat,
        "backend": "harbor",
        "outcome": _VALUE[verdict.outcome],
        "reason": _VALUE[verdict.reason],
        "reward": trial.reward,
        "error": f"{facts['exception_type']}: {facts['exception_message'] or ''}"
        if facts["exception_type"]
        else None,
        "limits": {},  # unknown: the analysis reads a missing ceiling as "unknown", not "none"
        "agent_phase": {
            "timed_out": facts["exception_type"] == "AgentTimeoutError",
            "duration_s": phase_s.get("agent_execution", 0.0),
        },
        "verifier_phase": {
            "timed_out": verdict.reason is _VERIFIER_TIMEOUT,
            "duration_s": phase_s.get("verifier", 0.0),
        },
        "evidence": {"notes": verdict.notes},
        "telemetry": {"host": _host(started, started_at)},
        "harbor": facts,
        "started_at": started_at,
        "finished_at": finished.isoformat(),
        "duration_s": seconds_between(started, finished) or 0.0,
    }


def _host(started: datetime, started_at: str) -> dict[str, Any]:
    return {
        "host_id": "harbor",
        "started_at": started_at,
        "local_hour": started.hour,
        "load1": None,
        "free_memory_bytes": 0,
        "trials_in_flight": 0,
    }


def _run_id(paths: Sequence[Path], by_label: dict[str, list[HarborTrial]]) -> str:
    """One submission: its label, so that `compare A B` names both sides; else the folder."""
    if len(by_label) == 1:
        return next(iter(by_label))
    return f"harbor-{Path(paths[0]).resolve().name}"


def _meta(
    meta: dict[str, Any],
    run_id: str,
    paths: Sequence[Path],
    labels: set[str],
    flags: dict[str, list[Flag]],
    tally: _Tally,
) -> dict[str, Any]:
    """The flags of the submissions imported now replace theirs; others' stay. What this import
    did not read (submission folders without a trial, files and folders skipped) is kept too,
    so that the leaderboard can say it: the last import's, beside the folders still without a
    trial from earlier ones."""
    new_sources = [str(Path(p).resolve()) for p in paths]
    sources = list(dict.fromkeys([*meta.get("sources", []), *new_sources]))
    return {
        "run_id": run_id,
        "backend": "harbor",
        "source": sources[0],
        "sources": sources,
        "enforcement": ENFORCEMENT,
        "concurrency": "unknown: Harbor's trial results do not record it",
        "images": "unknown: Harbor's task images are not in its trial results",
        "policies": {IMPORTED_POLICY: {}},
        "import_flags": {
            **{k: v for k, v in meta.get("import_flags", {}).items() if k not in labels},
            **{k: [f.to_json() for f in v] for k, v in flags.items()},
        },
        "import_skipped": {
            "submissions": {
                **{
                    k: v
                    for k, v in meta.get("import_skipped", {}).get("submissions", {}).items()
                    if os.path.basename(k) not in labels
                },
                **tally.submissions_skipped,
            },
            "files": list(tally.skipped),
            "folders": list(tally.folders_skipped),
        },
    }
