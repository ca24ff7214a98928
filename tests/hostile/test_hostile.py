"""A hostile agent cannot forge a pass, leave its limits, reach a secret or disturb the run.

Every attack of `_attacks.py` runs as one trial of a single run per backend (`process`, and `oci`
on Podman and on Docker), with the honest trial beside them and three trials in flight. The run
lives where the process sandbox binds the host read-only (/srv), a fake API key is planted in the
harness's environment, a key file sits in /etc and a canary on the host: each test then asserts
one attack's stored verdict, and the last ones what the whole run left (no secret anywhere, the
canary, the store, the host's cgroups and containers).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.config import RunConfig
from levelfield.executor import run
from levelfield.plan import plan_trials
from levelfield.policy import Policy, ResourceBounds
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.store import reading
from levelfield.tasks import load_dataset

from ..conftest import missing_sandbox_prerequisites, require
from ..integration._helpers import leftovers
from ._attacks import ATTACKS, Attack, write_dataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PLANTED_KEY = "sk-hostile-planted-7f3a9c2e51d04b8e"
KEY_ENV = "LEVELFIELD_HOSTILE_KEY"
ESCAPED = re.compile(r"^(ESCAPED|ALLOCATED)", re.MULTILINE)  # what an attack prints on success
MARKERS = ("HARNESS-MARKER-SOLUTION", "HARNESS-MARKER-RUN", "HARNESS-MARKER-KEYFILE")
ENGINES = {
    "podman": "unix:///run/podman/podman.sock",
    "docker": "unix:///run/levelfield-docker.sock",
}
# headroom, with a pids ceiling a fork bomb reaches in a moment on a shared 2-core host
POLICY = Policy(
    name="headroom-pids256",
    memory=ResourceBounds(ceiling="3x"),
    cpus=ResourceBounds(ceiling="3x"),
    storage=ResourceBounds(ceiling="3x"),
    pids_max=256,
)
BACKENDS = [
    pytest.param("process", marks=pytest.mark.sandbox),
    pytest.param("podman", marks=pytest.mark.oci),
    pytest.param("docker", marks=pytest.mark.oci),
]


@dataclass
class HostileRun:
    backend: str
    run_dir: Path
    records: dict[str, TrialRecord]
    canary: Path
    leftovers: list[str]


def _engine_problems(kind: str) -> list[str]:
    try:
        from levelfield.sandbox.oci import engine_report
    except ImportError as exc:
        return [f"the oci extra ({exc})"]
    report = engine_report(ENGINES[kind])
    if report.found and report.engine != kind:
        return [f"{ENGINES[kind]} serves {report.engine}, not {kind}"]
    return list(report.problems)


@pytest.fixture(scope="module", params=BACKENDS)
def hostile(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostileRun]:
    kind = request.param
    require(missing_sandbox_prerequisites(), "a process sandbox")
    if kind in ENGINES:
        require(_engine_problems(kind), f"the {kind} engine")
    saved = {name: os.environ.get(name) for name in ("DOCKER_HOST", KEY_ENV)}
    os.environ[KEY_ENV] = PLANTED_KEY
    if kind in ENGINES:
        os.environ["DOCKER_HOST"] = ENGINES[kind]
    home = Path("/srv") / f"levelfield-hostile-{uuid.uuid4().hex[:8]}"
    key_file = Path("/etc") / f"{home.name}.key"
    try:
        yield _run(kind, home, key_file, tmp_path_factory.mktemp(f"host-{kind}"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
        key_file.unlink(missing_ok=True)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def _run(kind: str, home: Path, key_file: Path, host_tmp: Path) -> HostileRun:
    """Where a careless user might put things: the run and the dataset under /srv (bound
    read-only into a process sandbox), a key file in /etc, root-only as keys should be."""
    run_dir = home / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "harness-secret.txt").write_text("HARNESS-MARKER-RUN\n")
    key_file.write_text("HARNESS-MARKER-KEYFILE\n")
    key_file.chmod(0o600)
    canary = host_tmp / "canary.txt"
    canary.write_text("untouched\n")
    places = {
        "RUN_DIR": str(run_dir),
        "DATASET": str(home / "dataset"),
        "KEY_FILE": str(key_file),
        "CANARY": str(canary),
        "CANARY_REL": str(canary).lstrip("/"),
    }
    dataset = write_dataset(home / "dataset", places)
    options = AgentOptions(
        command='bash "$LEVELFIELD_INSTRUCTION_FILE"', name="hostile", api_key_env=KEY_ENV
    )
    config = RunConfig(
        dataset=dataset,
        out=run_dir,
        agents=["command"],
        backend="process" if kind == "process" else "oci",
        concurrency=3,
        index_probe_every_s=0,
        agent_options=options,
    )
    trials = plan_trials(load_dataset(dataset).tasks, config.resolved_agents(), [POLICY])
    result = run(config, trials=trials)
    with reading(run_dir) as store:
        records = {r.task: r for r in store.records()}
    left = leftovers(result.run_id, run_dir) if kind == "process" else _containers(result.run_id)
    return HostileRun(kind, run_dir, records, canary, left)


def _containers(run_id: str) -> list[str]:
    import docker

    client = docker.DockerClient(base_url=os.environ["DOCKER_HOST"])
    found = client.api.containers(all=True, filters={"label": f"levelfield.run={run_id}"})
    return [c["Id"][:12] for c in found]


def _trial_dir(hostile: HostileRun, attack: Attack) -> Path:
    return hostile.run_dir / "trials" / hostile.records[attack.name].trial_key


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_each_attack_gets_its_verdict(hostile: HostileRun, attack: Attack) -> None:
    record = hostile.records[attack.name]
    evidence = " | ".join(record.evidence.notes)
    assert (record.outcome, record.reason) == attack.expected(hostile.backend), (
        f"{attack.name} on {hostile.backend}: {record.reason} ({record.error}); {evidence}"
    )
    assert attack.note in evidence, evidence
    assert attack.left in " | ".join(record.evidence.left_running), record.evidence.left_running
    trial = _trial_dir(hostile, attack)
    for log in (trial / "agent.log", trial / "logs" / "agent" / "watcher.log"):
        said = log.read_text(errors="replace") if log.is_file() else ""
        assert not ESCAPED.search(said), said[-2000:]


def test_the_ceiling_held_against_the_escape(hostile: HostileRun) -> None:
    """The escape attempts all failed, and the allocation was killed at the ceiling."""
    record = hostile.records["leave-cgroup"]
    assert record.evidence.oom_kills >= 1
    ceiling = record.limits["memory_ceiling_bytes"]
    peak = record.evidence.memory_peak_bytes
    assert peak is None or peak <= ceiling, (peak, ceiling)


def test_links_are_kept_as_links_and_specials_listed(hostile: HostileRun) -> None:
    attack = next(a for a in ATTACKS if a.name == "logs-specials")
    kept = _trial_dir(hostile, attack) / "logs" / "agent"
    assert os.readlink(kept / "shadow-link") == "/etc/shadow"
    assert os.readlink(kept / "deep" / "etc-link") == "/etc"
    assert (kept / "plain.txt").read_text() == "kept\n"
    assert not (kept / "fifo").exists() and not (kept / "socket").exists()
    notes = " | ".join(hostile.records["logs-specials"].evidence.notes)
    assert "agent/fifo (a fifo, not copied)" in notes, notes
    if hostile.backend == "process":  # an engine's archive leaves sockets out by itself
        assert "agent/socket (a socket, not copied)" in notes, notes


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.secret], ids=lambda a: a.name)
def test_what_the_agent_could_read_holds_no_secret(hostile: HostileRun, attack: Attack) -> None:
    """The agent wrote everything it could read, base64-encoded (masking would not hide it)."""
    loot = b"".join(
        base64.b64decode(path.read_text() + "==")
        for path in (_trial_dir(hostile, attack) / "logs" / "agent").glob("*.b64")
    )
    assert loot, "the attack wrote nothing"
    for secret in (*MARKERS, PLANTED_KEY):
        assert secret.encode() not in loot, f"{attack.name} read {secret}"


def test_the_run_stored_no_secret_and_changed_nothing_outside(hostile: HostileRun) -> None:
    assert {r.task for r in hostile.records.values()} == {a.name for a in ATTACKS}
    assert hostile.records["honest"].outcome is Outcome.PASSED
    assert all(r.reason is not Reason.HARNESS_ERROR for r in hostile.records.values())
    for path in hostile.run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path
    with sqlite3.connect(hostile.run_dir / "run.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert hostile.canary.read_text() == "untouched\n"
    assert hostile.leftovers == []


def test_attack_table(hostile: HostileRun) -> None:
    """The table of the closing note: attack → stored outcome and reason on this backend."""
    print(f"\n{'attack':<20} {hostile.backend}")
    for attack in ATTACKS:
        record = hostile.records[attack.name]
        print(f"{attack.name:<20} {record.outcome}/{record.reason}")
    forged = [
        a.name
        for a in ATTACKS
        if not a.name.startswith("honest") and hostile.records[a.name].outcome is Outcome.PASSED
    ]
    assert forged == []
