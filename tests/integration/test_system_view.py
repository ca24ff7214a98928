"""The host's /var and /srv as a process sandbox binds them: without the mounts below them.

Found in a run beside Docker trials: a process trial's grader failed to start ("Can't bind
mount /oldroot/var ... Unable to apply mount flags: remount .../merged/etc/hostname") because a
container stopped while bubblewrap copied /var's mounts, and the trial was booked
`infra_error/verifier_error`: one trial's verdict decided by another's. Here mounts under /var
come and go without pause while trials start and grade, and another "trial's" volume is mounted
there with a secret in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from levelfield.records import Outcome, Reason
from levelfield.sandbox import _system_view, trial_roots
from levelfield.store import reading

from ..conftest import MakeTask
from ._helpers import run_records

pytestmark = [pytest.mark.sandbox]

SECRET = "another-trials-file-" + uuid.uuid4().hex[:8]


@pytest.fixture
def churn() -> Iterator[Path]:
    """A volume under /var holding another trial's file, and a mount that comes and goes below
    it as fast as the kernel allows, until the test ends."""
    root = Path("/var/lib") / f"levelfield-churn-{uuid.uuid4().hex[:8]}"
    volume, flicker = root / "volume", root / "flicker"
    for path in (volume, flicker):
        path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], check=True)
    (volume / "secret.txt").write_text(SECRET)
    stop = threading.Event()

    def flicker_mounts() -> None:
        while not stop.is_set():
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(flicker)], check=False)
            subprocess.run(["umount", str(flicker)], check=False)

    thread = threading.Thread(target=flicker_mounts, daemon=True)
    thread.start()
    try:
        yield volume
    finally:
        stop.set()
        thread.join()
        for path in (flicker, volume):
            subprocess.run(["umount", "-q", str(path)], check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_mounts_coming_and_going_under_var_decide_no_trial(
    make_task: MakeTask, tmp_path: Path, churn: Path
) -> None:
    look = f"cat {churn}/secret.txt > /app/seen 2>&1; ls -A {churn} >> /app/seen; echo 42 > /app/a"
    for name in ("a", "b", "c", "d"):
        make_task(name, solve=look, test="grep -q 42 /app/a && ! grep -q another /app/seen")
    records = run_records(tmp_path / "dataset", tmp_path / "run", backend="process",
                          repeats=3)  # fmt: skip
    verdicts = {(r.outcome, r.reason) for r in records}
    assert verdicts == {(Outcome.PASSED, Reason.TESTS_PASSED)}, [
        (r.task, r.reason, r.evidence.notes if r.evidence else None) for r in records
    ]
    assert len(records) == 12
    view = _system_view.view_of("/var")
    assert view != "/var" and _system_view.submounts(view) == []


ANSWER = "the-other-runs-answer-" + uuid.uuid4().hex[:8]


@pytest.fixture
def other_run(make_task: MakeTask, tmp_path: Path) -> Iterator[Path]:
    """A finished run under /srv (a host folder a process sandbox sees), whose agent's log
    and workspace hold its answer; removed with its registry entry at the end."""
    from levelfield.sandbox import _bwrap

    _bwrap.host_private_entries()  # this process's walk of the host, made before that run
    root = Path("/srv") / f"levelfield-other-{uuid.uuid4().hex[:8]}"
    task = make_task("first", solve=f"echo {ANSWER} | tee /app/answer.txt")
    (record,) = run_records(task, root / "run", backend="process")
    assert record.outcome is Outcome.FAILED  # its test wants /app/done: stored all the same
    assert ANSWER in (root / "run" / "trials" / record.trial_key / "agent.log").read_text()
    try:
        yield root / "run"
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
        trial_roots.registered()  # drops the entry of the folder just removed


SEARCH = "grep -rs {answer} {run} > /app/seen; ls -A {run} >> /app/seen; touch /app/done"


def test_another_runs_trials_are_hidden_from_a_process_agent(
    make_task: MakeTask, tmp_path: Path, other_run: Path
) -> None:
    """A run kept under /srv holds its trials' logs and the agent's work: another run's agent
    must not read them (another trial's answer, to copy). Seen by an agent of this process,
    whose walk of the host may predate that run (the registry hides it), and by one in a fresh
    harness with the registry gone, as after a reboot (the folder's mark hides it)."""
    search = SEARCH.format(answer=ANSWER, run=other_run)
    unseen = f"test -e /app/done && ! grep -q {ANSWER} /app/seen && ! grep -q run.db /app/seen"
    task = make_task("second", solve=search, test=unseen)
    (here,) = run_records(task, tmp_path / "here", backend="process")
    assert (here.outcome, here.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), here.error
    for link in trial_roots.REGISTRY.iterdir():
        if Path(os.readlink(link)) == other_run:
            link.unlink()  # only the mark is left
    fresh = tmp_path / "fresh"
    done = subprocess.run(
        [sys.executable, "-m", "levelfield", "run", str(task), "--out", str(fresh),
         "--backend", "process"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    with reading(fresh) as store:
        (record,) = store.records()
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), record.error


def test_a_folder_of_trials_is_covered_whole_not_file_by_file(tmp_path: Path) -> None:
    """A log's ring, root-only and short-lived, inside a folder of trials: listed one by one, it
    would fail a sandbox's start once gone (bubblewrap cannot bind /dev/null on a path that is
    no more). The walk lists the marked folder, nothing in it."""
    from levelfield.sandbox import _bwrap

    root = Path("/srv") / f"levelfield-walk-{uuid.uuid4().hex[:8]}"
    trials, other = root / "run" / "trials", root / "elsewhere"
    for folder in (trials / "k1", other):
        folder.mkdir(parents=True)
    try:
        ring = trials / "k1" / "agent.log.tail-1-7f"
        ring.write_bytes(b"ring")
        ring.chmod(0o600)
        (other / "key").write_bytes(b"secret")
        (other / "key").chmod(0o600)
        trial_roots.mark(root / "run")
        found = _bwrap.host_private_entries.__wrapped__((str(root),))
        assert set(found) == {root / "run", other / "key"}, found
        assert root / "run" in trial_roots.registered()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
        trial_roots.registered()
