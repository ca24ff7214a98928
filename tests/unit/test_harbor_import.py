"""Harbor job directories as Harbor writes them: one result.json per trial beside a job's own."""

import json
from pathlib import Path

from levelfield.harbor.importing import import_harbor_job
from levelfield.records import Outcome, Reason
from levelfield.store import reading


def _trial(
    job: Path,
    name: str,
    task: str,
    *,
    reward: float | None = None,
    exception: str | None = None,
    message: str = "",
    start: str = "10:00:00",
) -> None:
    data = {
        "task_name": task,
        "trial_name": name,
        "trial_uri": f"file://{job}/{name}",
        "agent_info": {
            "name": "terminus-2",
            "version": "1",
            "model_info": {"name": "gpt-x", "provider": "openai"},
        },
        "verifier_result": {"rewards": {"reward": reward}} if reward is not None else None,
        "exception_info": {
            "exception_type": exception,
            "exception_message": message,
            "exception_traceback": "",
            "occurred_at": "2026-01-01T10:00:05",
        }
        if exception
        else None,
        "started_at": f"2026-01-01T{start}",
        "finished_at": "2026-01-01T10:05:00",
        "agent_execution": {
            "started_at": f"2026-01-01T{start}",
            "finished_at": "2026-01-01T10:04:00",
        },
    }
    (job / name).mkdir(parents=True)
    (job / name / "result.json").write_text(json.dumps(data))


def test_a_harbor_job_becomes_a_run_with_reasons_from_exception_types(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _trial(job, "a__1", "alpha", reward=1.0, start="10:00:00")
    _trial(job, "a__2", "alpha", reward=0.0, start="10:01:00")
    _trial(job, "b__1", "beta", exception="AgentTimeoutError")
    _trial(job, "c__1", "gamma", exception="RewardFileNotFoundError")
    _trial(job, "d__1", "delta", exception="RuntimeError", message="container exit code 137")
    _trial(job, "e__1", "eps", exception="RateLimitError")
    _trial(job, "f__1", "zeta", exception="AgentSetupTimeoutError")
    (job / "result.json").write_text(json.dumps({"id": "job", "stats": {}}))  # the job's own
    (job / "broken").mkdir()
    (job / "broken" / "result.json").write_text("{")

    result = import_harbor_job(job, tmp_path / "run")
    assert (result.imported, result.already_stored) == (7, 0)
    with reading(tmp_path / "run") as store:
        records = {(r.task, r.repeat): r for r in store.records()}
    assert records[("alpha", 1)].outcome is Outcome.PASSED
    assert records[("alpha", 2)].reason is Reason.TESTS_FAILED  # repeats in start order
    assert records[("beta", 1)].reason is Reason.AGENT_TIMEOUT
    assert records[("gamma", 1)].outcome is Outcome.INFRA_ERROR
    assert records[("delta", 1)].reason is Reason.OOM_KILLED
    assert records[("eps", 1)].reason is Reason.API_ERROR
    assert records[("zeta", 1)].reason is Reason.AGENT_SETUP_FAILED
    assert records[("alpha", 1)].agent == "terminus-2:gpt-x"
    assert records[("alpha", 1)].telemetry.phase_s == {} and records[("alpha", 1)].agent_phase
    assert "no kernel evidence" in records[("beta", 1)].evidence.notes[0]

    again = import_harbor_job(job, tmp_path / "run")
    assert (again.imported, again.already_stored) == (0, 7)  # idempotent
