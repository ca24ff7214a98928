"""A hostile agent cannot forge a pass, leave its limits, reach a secret or disturb the run.

Every attack of `_attacks.py` runs as one trial of a single run per backend (`process`, and `oci`
on Podman and on Docker), with the honest trials beside them and three trials in flight. The run
lives where the process sandbox binds the host read-only (/srv), a fake API key is planted in the
harness's environment, a key file sits in /etc and a canary on the host: each test then asserts
one attack's stored verdict, and the last ones what the whole run left (no secret anywhere, the
canary, the store, the host's cgroups and containers).

The host also holds what a trial must never reach (`HostCanaries`): a key in root's user keyring
(as a trial of an earlier run would have left it), a service listening on 0.0.0.0, and a proxy
whose credential is in the harness's HTTPS_PROXY; each records, on the host, whoever reached it.
"""

from __future__ import annotations

import base64
import os
import re
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
from levelfield.sandbox._walk import remove_path
from levelfield.store import reading
from levelfield.tasks import load_dataset

from ..conftest import missing_sandbox_prerequisites, require
from ..integration._helpers import leftovers
from ._attacks import ATTACKS, Attack, write_dataset
from ._canaries import CANARY_PREFIX, HostCanaries, encodings, files_under

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
FAILED_TESTS = (Outcome.FAILED, Reason.TESTS_FAILED)
PASSED = (Outcome.PASSED, Reason.TESTS_PASSED)
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
    host: HostCanaries


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
    host = HostCanaries.start()
    saved = {name: os.environ.get(name) for name in ("DOCKER_HOST", KEY_ENV, *host.environ)}
    os.environ.update({KEY_ENV: PLANTED_KEY, **host.environ})
    if kind in ENGINES:
        os.environ["DOCKER_HOST"] = ENGINES[kind]
    home = Path("/srv") / f"levelfield-hostile-{uuid.uuid4().hex[:8]}"
    key_file = Path("/etc") / f"{home.name}.key"
    try:
        yield _run(kind, home, key_file, tmp_path_factory.mktemp(f"host-{kind}"), host)
    finally:
        host.stop()
        remove_path(home)  # it holds the agent's 1,100 nested folders, copied
        key_file.unlink(missing_ok=True)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def _run(kind: str, home: Path, key_file: Path, host_tmp: Path, host: HostCanaries) -> HostileRun:
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
        **host.places(),
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
    first = [a.name for a in ATTACKS if a.first]  # in flight together, from the start
    trials.sort(key=lambda t: first.index(t.task.name) if t.task.name in first else len(first))
    result = run(config, trials=trials)
    with reading(run_dir) as store:
        records = {r.task: r for r in store.records()}
    left = leftovers(result.run_id, run_dir) if kind == "process" else _containers(result.run_id)
    host.settle()
    return HostileRun(kind, run_dir, records, canary, left, host)


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
    for path in files_under(hostile.run_dir):
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
        if a.expect != PASSED and hostile.records[a.name].outcome is Outcome.PASSED
    ]
    assert forged == []


# -- sealed: no byte between two trials, or from a trial to the host's services --------------------


def _agent_log(hostile: HostileRun, name: str) -> str:
    attack = next(a for a in ATTACKS if a.name == name)
    return (_trial_dir(hostile, attack) / "agent.log").read_text(errors="replace")


def test_no_key_crosses_trials_or_runs(hostile: HostileRun) -> None:
    """A key planted by one trial, or left on the host by an earlier run, is out of every
    trial's reach, and nothing a trial tried is in the host's keyring afterwards."""
    assert hostile.records["keyring-read"].outcome is Outcome.FAILED
    assert "42" not in _agent_log(hostile, "keyring-read").replace(" 42 ", "")
    keys = hostile.host.host_keys
    assert any(hostile.host.key_desc in line for line in keys), keys  # the settle saw the keyring
    planted = [line for line in keys if CANARY_PREFIX not in line]
    assert planted == [], planted  # only the host's canaries are there (other workers' runs too)


def test_trials_in_flight_never_meet(hostile: HostileRun) -> None:
    """Both peers served their copy of the answer while scanning the sandbox pool, in flight
    together; neither reached the other."""
    a, b = hostile.records["peer-a"], hostile.records["peer-b"]
    assert a.started_at < b.finished_at and b.started_at < a.finished_at, (a, b)
    for name in ("peer-a", "peer-b"):
        assert "scanned the pool" in _agent_log(hostile, name)
        attack = next(x for x in ATTACKS if x.name == name)
        seen = _trial_dir(hostile, attack) / "logs" / "agent" / "seen.txt"
        assert not seen.exists(), seen.read_text()
    honest = [hostile.records[n] for n in ("honest", "honest-net")]
    assert all(r.outcome is Outcome.PASSED for r in honest), honest


def test_no_host_service_answers(hostile: HostileRun) -> None:
    """The listener on the host's 0.0.0.0 accepted nothing from any trial, at any address."""
    assert hostile.host.reached == [], hostile.host.reached
    tried = _agent_log(hostile, "host-service")
    assert hostile.host.places()["HOST_PORT"] and "169.254.169.254:" in tried, tried[-1000:]


def test_no_proxy_credential_enters_in_any_encoding(hostile: HostileRun) -> None:
    """The relay reached the host's proxy with the credential; the sandbox never held it, so
    nothing the run wrote holds it, plain, reversed or in base64."""
    assert any(right for right, _ in hostile.host.proxied), hostile.host.proxied
    assert "RELAYED HTTP/1.1 200" in _agent_log(hostile, "proxy-credential")
    secret = hostile.host.proxy_secret
    both = f"{hostile.host.proxy_user}:{secret}"
    for path in files_under(hostile.run_dir):
        data = path.read_bytes()
        for form in (*encodings(secret), *encodings(both)):
            assert form not in data, (path, form)


# -- bounded: what the agent prints or leaves costs the harness a bounded amount ----------------


def test_two_gigabytes_printed_leave_a_capped_log(hostile: HostileRun) -> None:
    from levelfield.sandbox._logcap import LOG_MAX_BYTES

    attack = next(a for a in ATTACKS if a.name == "print-2g")
    log = _trial_dir(hostile, attack) / "agent.log"
    assert log.stat().st_size <= LOG_MAX_BYTES + 4096, log.stat().st_size
    assert log.read_bytes()[-200:].endswith(b"printed\n")  # its tail kept
    notes = " | ".join(hostile.records["print-2g"].evidence.notes)
    assert "agent.log cut: 2147483656 bytes printed" in notes, notes


def test_deep_folders_are_copied_and_the_agents_own_failure(hostile: HostileRun) -> None:
    attack = next(a for a in ATTACKS if a.name == "deep-agent-logs")
    leaf = _trial_dir(hostile, attack) / "logs" / "agent" / ("d/" * 1100) / "leaf"
    assert leaf.read_text() == "leaf\n"
    for name in ("deep-agent-logs", "deep-verifier-logs"):
        record = hostile.records[name]
        assert (record.outcome, record.reason) == FAILED_TESTS, (name, record.error)
        assert "made 1100 folders" in _agent_log(hostile, name) or name == "deep-verifier-logs"


def test_sparse_files_are_copied_sparse(hostile: HostileRun) -> None:
    attack = next(a for a in ATTACKS if a.name == "sparse-logs")
    kept = _trial_dir(hostile, attack) / "logs" / "agent"
    for name in ("sparse1", "sparse2"):
        st = (kept / name).stat()
        assert st.st_size >= 250 << 20, (name, st.st_size)
        assert st.st_blocks * 512 < 1 << 20, (name, st.st_blocks * 512)
