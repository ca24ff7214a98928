"""`levelfield run` on a dataset where one task uses a Harbor feature no backend runs (sidecar
services): the good task runs, the other is skipped before any trial of it, named with its
reason on the terminal and in the run's record, and the run exits as for any skipped task."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import MakeTask

pytestmark = pytest.mark.sandbox

COMPOSE = "services:\n  db:\n    image: postgres:16\n"


def test_a_compose_task_is_skipped_with_its_reason_and_the_good_one_runs(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("good")
    sidecar = make_task("sidecar", files={"environment/docker-compose.yaml": COMPOSE})
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "levelfield", "run", str(sidecar.parent), "--out", str(out),
            "--backend", "process", "--agent", "oracle", "--policy", "uncapped"]  # fmt: skip

    ran = subprocess.run(argv, capture_output=True, text=True, timeout=300)

    assert ran.returncode == 0, ran.stderr[-3000:]
    said = " ".join(ran.stderr.split())  # as printed, wrapped to the terminal's width
    assert "skipped task" in said and "sidecar" in said, said
    assert "environment/docker-compose.yaml: sidecar services" in said, said
    assert "levelfield's process backend does not run it" in said, said
    with sqlite3.connect(out / "run.db") as conn:
        records = conn.execute("SELECT task, outcome FROM trials").fetchall()
        (skipped,) = conn.execute("SELECT value FROM meta WHERE key = 'skipped_tasks'").fetchone()
    assert records == [("good", "passed")]
    (entry,) = json.loads(skipped)
    assert entry["task"] == "sidecar"
    assert "environment/docker-compose.yaml" in entry["problem"]
    assert "process backend" in entry["problem"]
