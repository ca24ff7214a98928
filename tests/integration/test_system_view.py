"""The host's /var and /srv as a process sandbox binds them: without the mounts below them.

Found in a run beside Docker trials: a process trial's grader failed to start ("Can't bind
mount /oldroot/var ... Unable to apply mount flags: remount .../merged/etc/hostname") because a
container stopped while bubblewrap copied /var's mounts, and the trial was booked
`infra_error/verifier_error`: one trial's verdict decided by another's. Here mounts under /var
come and go without pause while trials start and grade, and another "trial's" volume is mounted
there with a secret in it.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from levelfield.records import Outcome, Reason
from levelfield.sandbox import _system_view

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
