"""Jobs, submissions and leaderboards laid out as Harbor and the leaderboard's uploaders lay
them out: labels, task names, repeats, flags and what is refused."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from levelfield.errors import InputError
from levelfield.harbor.importing import IMPORTED_POLICY, import_harbor
from levelfield.harbor.result_fields import parse_json, parse_result
from levelfield.harbor.trial_file import _facts, checked_reward, fields_of
from levelfield.records import Outcome, Reason
from levelfield.store import reading

from ..conftest import TB2_LEADERBOARD, require_leaderboard


def write_trial(
    job: Path,
    task: str,
    n: int,
    *,
    reward: float | None = 1.0,
    agent: str = "terminus-2",
    model: str | None = "gpt-x",
    exception: str | None = None,
    trial_id: str | None = None,
) -> None:
    name = f"{task.rpartition('/')[2]}__{n:03d}"
    data = {
        "id": trial_id or f"{job.name}-{name}",
        "task_name": task,
        "trial_name": name,
        "task_checksum": f"sum-{task.rpartition('/')[2]}",
        "config": {
            "environment": {"type": "daytona", "override_cpus": 4},
            "timeout_multiplier": 2.0,
            "agent": {"override_timeout_sec": 1800},
        },
        "agent_info": {"name": agent, "version": "1.0", "model_info": {"name": model}},
        "verifier_result": {"rewards": {"reward": reward}} if reward is not None else None,
        "exception_info": {"exception_type": exception, "exception_message": "it broke"}
        if exception
        else None,
        "started_at": f"2026-01-01T10:{n:02d}:00",
        "finished_at": f"2026-01-01T10:{n:02d}:30",
        "agent_execution": {
            "started_at": f"2026-01-01T10:{n:02d}:05",
            "finished_at": f"2026-01-01T10:{n:02d}:25",
        },
    }
    (job / name).mkdir(parents=True)
    (job / name / "result.json").write_text(json.dumps(data))


def submission(root: Path, name: str, tasks: list[str], k: int = 2, **trial: object) -> Path:
    """`k` trials per task over two job folders, plus each job's own summary."""
    for j in range(2):
        job = root / name / f"job-{j}"
        for task in tasks:
            for n in range(j, k, 2):
                write_trial(job, task, n, **trial)  # type: ignore[arg-type]
        job.mkdir(parents=True, exist_ok=True)
        (job / "result.json").write_text(json.dumps({"id": "job", "stats": {}}))
    return root / name


def records(run: Path) -> list:
    with reading(run) as store:
        return list(store.records())


def test_a_leaderboard_is_one_configuration_per_submission(tmp_path: Path) -> None:
    board = tmp_path / "board"
    submission(board, "Alpha__GPT", ["terminal-bench/fix-git", "regex-log"])
    submission(board, "Beta__Opus", ["fix-git", "terminal-bench/regex-log"], agent="other")
    result = import_harbor([board], tmp_path / "run")
    assert (result.imported, result.submissions) == (8, {"Alpha__GPT": 4, "Beta__Opus": 4})
    stored = records(tmp_path / "run")
    assert {r.agent for r in stored} == {"Alpha__GPT", "Beta__Opus"}
    assert {r.task for r in stored} == {"fix-git", "regex-log"}  # the prefix pairs them
    assert {r.policy for r in stored} == {IMPORTED_POLICY}
    alpha = sorted((r for r in stored if r.agent == "Alpha__GPT"), key=lambda r: r.trial_key)
    assert {(r.task, r.repeat) for r in alpha} == {
        (t, k) for t in ("fix-git", "regex-log") for k in (1, 2)
    }
    facts = alpha[0].harbor
    assert facts is not None and facts.submission == "Alpha__GPT" and facts.job.startswith("job-")
    assert (facts.sandbox_provider, facts.timeout_multiplier, facts.model) == (
        "daytona",
        2.0,
        "gpt-x",
    )
    assert facts.overrides == {"agent.override_timeout_sec": 1800, "environment.override_cpus": 4}
    assert facts.phase_s == {"agent_execution": 20.0}
    assert alpha[0].limits == {}  # nobody knows the submitter's ceiling
    with reading(tmp_path / "run") as store:
        assert store.meta()["run_id"] == "harbor-board"

    again = import_harbor([board], tmp_path / "run")
    assert (again.imported, again.already_stored) == (0, 8)


def test_a_submission_is_named_by_its_folder_or_its_label(tmp_path: Path) -> None:
    one = submission(tmp_path, "Gamma__Kimi", ["fix-git"])
    import_harbor([one], tmp_path / "run")
    assert {r.agent for r in records(tmp_path / "run")} == {"Gamma__Kimi"}
    with reading(tmp_path / "run") as store:
        assert store.meta()["run_id"] == "Gamma__Kimi"  # so `compare A B` names both sides
    import_harbor([one], tmp_path / "labelled", label="gamma-rerun")
    assert {r.agent for r in records(tmp_path / "labelled")} == {"gamma-rerun"}


def test_a_label_fits_one_job_or_submission_only(tmp_path: Path) -> None:
    submission(tmp_path / "board", "A", ["fix-git"])
    submission(tmp_path / "board", "B", ["fix-git"])
    with pytest.raises(InputError, match="leaderboard"):
        import_harbor([tmp_path / "board"], tmp_path / "run", label="x")
    with pytest.raises(InputError, match="one job or submission"):
        import_harbor(
            [tmp_path / "board" / "A", tmp_path / "board" / "B"], tmp_path / "r", label="x"
        )
    with pytest.raises(InputError, match="no such directory"):
        import_harbor([tmp_path / "board" / "A" / "job-0" / "nothing"], tmp_path / "r")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no Harbor trial"):
        import_harbor([tmp_path / "empty"], tmp_path / "r")
    assert not (tmp_path / "run").exists()


def test_a_broken_trial_file_is_a_trial_without_a_reward(tmp_path: Path) -> None:
    """The trial ran (its folder is a trial's): it stays in, unreadable, an infra error with no
    reward, under the full name of its task; a broken file elsewhere is skipped, named."""
    board = tmp_path / "board"
    submission(board, "A", ["fix-git", "regex-log"])
    broken = board / "A" / "job-0" / "regex-log__000" / "result.json"
    broken.write_text('{"task_name": "regex-log", "trial_name": ')
    stray = board / "A" / "job-0" / "notes" / "result.json"
    stray.parent.mkdir()
    stray.write_text("{")
    result = import_harbor([board], tmp_path / "run")
    assert result.imported == 4
    assert len(result.skipped) == 1 and str(stray) in result.skipped[0]
    (flag,) = [f for f in result.flags["A"] if f.kind == "unreadable_trials"]
    assert "regex-log__000" in flag.detail
    (kept,) = [r for r in records(tmp_path / "run") if r.harbor.trial_name == "regex-log__000"]
    assert (kept.task, kept.reward, kept.reason) == ("regex-log", None, Reason.HARNESS_ERROR)
    assert kept.evidence.notes[0].startswith("unreadable result.json: JSONDecodeError")


def test_reasons_come_from_exceptions_and_rewards(tmp_path: Path) -> None:
    job = tmp_path / "S" / "job"
    write_trial(job, "a", 0, reward=1.0, exception="AgentTimeoutError")
    write_trial(job, "b", 0, reward=None, exception="NonZeroAgentExitCodeError")
    write_trial(job, "c", 0, reward=None, exception="DaytonaError")
    write_trial(job, "d", 0, reward=None, exception="SomethingNewError")
    import_harbor([tmp_path / "S"], tmp_path / "run")
    by_task = {r.task: r for r in records(tmp_path / "run")}
    assert by_task["a"].outcome is Outcome.PASSED and by_task["a"].agent_phase.timed_out
    assert by_task["b"].reason is Reason.AGENT_ERROR
    assert by_task["c"].reason is Reason.SANDBOX_ERROR
    assert by_task["d"].outcome is Outcome.INFRA_ERROR
    assert any("unclassified" in note for note in by_task["d"].evidence.notes)
    assert by_task["d"].harbor.exception_type == "SomethingNewError"


def test_flags_name_what_looks_wrong_with_a_submission(tmp_path: Path) -> None:
    board = tmp_path / "board"
    tasks = ["t1", "t2", "t3"]
    submission(board, "Plain", tasks)
    copy = submission(board, "Other", tasks, k=2)
    shutil.copytree(board / "Plain", board / "Copy")  # every trial's outcome duplicated
    mixed = submission(board, "Mixed", tasks)
    write_trial(mixed / "job-0", "t1", 7, agent="oracle", model=None)  # K 3 on one task
    write_trial(mixed / "job-1", "t2", 8, trial_id="job-1-t2__001")  # id of another trial
    write_trial(copy / "job-0", "t4", 0)  # a task nobody else has
    result = import_harbor([board], tmp_path / "run")
    kinds = {label: {f.kind for f in flags} for label, flags in result.flags.items()}
    assert kinds["Mixed"] == {"other_agents", "uneven_k", "duplicate_trials"}
    assert "duplicate_outcomes" in kinds["Plain"] and "duplicate_outcomes" in kinds["Copy"]
    assert "task_set" in kinds["Other"]
    assert "Copy" in next(f.detail for f in result.flags["Plain"] if f.kind == "duplicate_outcomes")
    with reading(tmp_path / "run") as store:
        stored = store.meta()["import_flags"]
    assert {f["kind"] for f in stored["Mixed"]} == kinds["Mixed"]


def test_submissions_are_found_at_their_level_whatever_lies_above_or_below(
    tmp_path: Path,
) -> None:
    """A folder above the leaderboard (as the upstream repository nests it), a submission
    whose trials lie one level deeper, and one without a job folder."""
    board = tmp_path / "submissions" / "terminal-bench" / "2.0"
    submission(board, "A", ["fix-git"])
    submission(board, "B", ["fix-git"])
    deeper = board / "C" / "jobs"
    write_trial(deeper / "job-0", "fix-git", 0)
    write_trial(board / "D", "fix-git", 0)  # no job folder
    result = import_harbor([tmp_path / "submissions"], tmp_path / "run")
    assert result.submissions == {"A": 2, "B": 2, "C": 1, "D": 1}
    stored = {r.agent: r for r in records(tmp_path / "run")}
    assert stored["C"].harbor.job == "job-0"


@pytest.mark.parametrize(
    ("rewards", "reward", "words"),
    [
        ({"reward": 1.0}, 1.0, None),
        ({"reward": 1}, 1.0, None),
        ({"a": 1.0, "b": 0.0}, 0.5, None),  # no `reward`: the mean, as Harbor's reward.json
        ({"reward": 0.25, "n_tests": 12}, 0.25, None),  # `reward` decides, other keys are facts
        (None, None, None),
        ({}, None, None),
        ({"reward": 2.0}, None, "reward is 2.0: outside the reward's range [0, 1]"),
        ({"reward": -1}, None, "reward is -1: outside the reward's range [0, 1]"),
        ({"reward": True}, None, "reward is true: a boolean, not a number"),
        ({"reward": "1.0"}, None, 'reward is "1.0": a string, not a number'),
        ({"reward": float("nan")}, None, "reward is NaN: not a number (NaN)"),
        ({"reward": float("inf")}, None, "reward is Infinity: outside the reward's range"),
        ({"reward": None}, None, "reward is null: a null, not a number"),
        ({"a": 1.0, "b": "x"}, None, 'rewards.b is "x": a string, not a number'),
        (1.0, 1.0, None),
        ([1.0], None, "verifier_result.rewards is [1.0]: a list, not a number"),
    ],
)
def test_a_reward_is_a_number_in_0_1_or_says_what_it_is(
    rewards: object, reward: float | None, words: str | None
) -> None:
    got, problem = checked_reward(rewards)
    assert got == reward
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem and problem.endswith("so not a pass")


def test_files_that_are_not_trials_say_why_and_job_summaries_are_counted(tmp_path: Path) -> None:
    board = tmp_path / "board"
    submission(board, "A", ["fix-git", "regex-log"])
    job = board / "A" / "job-0"
    for name, data in (
        ("no-name", {"trial_name": "x", "verifier_result": None}),
        ("number", {"task_name": 7, "trial_name": "y"}),
        ("list", [1, 2]),
    ):
        (job / name).mkdir()
        (job / name / "result.json").write_text(json.dumps(data))
    result = import_harbor([board], tmp_path / "run")
    assert (result.found, result.imported, result.job_summaries) == (9, 4, 2)
    reasons = sorted(s.split(": ", 1)[1] for s in result.skipped)
    assert reasons == [
        "not a Harbor trial result: a JSON list, not an object",
        "not a Harbor trial result: no task_name",
        "not a Harbor trial result: task_name is 7, not a string",
    ]


def test_symlinked_folders_are_followed_once_and_loops_are_said(tmp_path: Path) -> None:
    board, elsewhere = tmp_path / "board", tmp_path / "elsewhere"
    submission(board, "A", ["fix-git"])
    submission(elsewhere, "B", ["fix-git"])
    (board / "B").symlink_to(elsewhere / "B")  # a submission kept elsewhere: followed
    (board / "A" / "job-0" / "up").symlink_to(board)  # a loop
    (board / "C").symlink_to(board / "A")  # a second name for A: read once
    (board / "D").symlink_to(tmp_path / "missing")
    result = import_harbor([board], tmp_path / "run")
    assert result.submissions == {"A": 2, "B": 2}
    assert (result.found, result.imported, result.job_summaries) == (8, 4, 4)
    said = sorted(s.split(": ", 1)[1].split(",")[0] for s in result.folders_skipped)
    assert said == [
        f"a broken symlink to {tmp_path / 'missing'}",
        f"a symlink to {board}",
        f"a symlink to {board / 'A'}",
    ]


def test_no_k_is_unusual_when_no_k_is_held_by_most_submissions(tmp_path: Path) -> None:
    board = tmp_path / "board"
    submission(board, "Five", ["t1", "t2"], k=5)
    submission(board, "One", ["t1", "t2"], k=1)
    uneven = submission(board, "Uneven", ["t1", "t2"], k=2)
    write_trial(uneven / "job-0", "t1", 9)
    flags = import_harbor([board], tmp_path / "run").flags
    assert not any(f.kind == "unusual_k" for found in flags.values() for f in found)
    submission(board, "AlsoFive", ["t1", "t2"], k=5)
    submission(board, "FiveAgain", ["t1", "t2"], k=5)
    flags = import_harbor([board], tmp_path / "run2").flags
    (unusual,) = [f for f in flags["One"] if f.kind == "unusual_k"]
    assert unusual.detail == "K = 1 trials per task where most submissions (3 of 5) have 5"


def test_the_fast_read_and_the_whole_file_read_make_the_same_facts() -> None:
    """parse_result keeps a few fields of each file and checks their types in pydantic; a file
    that does not fit is read whole. On real trial files (the first 3,000 of the shared
    leaderboard's archive) both make the same facts; on odd ones the whole read makes what
    it can."""
    require_leaderboard()
    compared = 0
    with tarfile.open(TB2_LEADERBOARD) as archive:
        for member in archive:
            if compared >= 3000:
                break
            if not member.name.endswith("/result.json"):
                continue
            raw = archive.extractfile(member).read()  # type: ignore[union-attr]
            fast = parse_result(raw)
            if fast is None:
                continue  # a job's summary
            whole = fields_of(parse_json(raw))
            assert _facts(fast, fast.get("rewards")) == _facts(whole, whole.get("rewards"))
            assert (fast.get("started_at"), fast.get("finished_at")) == (
                whole["started_at"],
                whole["finished_at"],
            )
            compared += 1
    assert compared == 3000
    odd = {
        "task_name": "t",
        "trial_name": "t__1",
        "agent_info": {"name": 7, "model_info": None},
        "config": {"timeout_multiplier": float("nan"), "agent": {"override_timeout_sec": True}},
        "started_at": "2026-01-01T10:00:00Z",
        "agent_execution": {"started_at": "2026-01-01T10:00:00Z", "finished_at": "nope"},
    }
    raw = json.dumps(odd).encode()
    assert parse_result(raw) is None
    with pytest.raises(ValueError, match="nope"):  # a timestamp that is not one: skipped
        fields_of(parse_json(raw))
    odd["agent_execution"] = {"started_at": "2026-01-01T10:00:00Z"}
    facts = _facts(fields_of(parse_json(json.dumps(odd).encode())), None)
    assert (facts["agent_name"], facts["timeout_multiplier"], facts["overrides"]) == ("7", None, {})
    assert facts["phase_s"] == {}
