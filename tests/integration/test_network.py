"""Bandwidth as the trial saw it: a real download of a file of known size inside a trial, on both
backends, counted by the trial's own network counters; pressure and steal recorded beside it.

The package index runs in a network namespace of its own (see _package_index.py), so the process
trial's download crosses its veth pair and the NAT rule, and the container's crosses the engine's
bridge, without any byte leaving the machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from levelfield.analysis.table import trials_frame
from levelfield.config import RunConfig
from levelfield.executor import run
from levelfield.network import probe_index
from levelfield.plan import plan_trials
from levelfield.policy import PRESETS
from levelfield.records import Outcome, TrialRecord
from levelfield.runner import TrialContext, run_trial
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.sandbox._netns import NAME_PREFIX, NETNS_DIR, namespace_name
from levelfield.store import reading
from levelfield.tasks import load_task

from ..conftest import MakeTask, require
from ._helpers import leftovers
from ._package_index import PackageIndex, package_index
from .test_oci import ENGINES, _engine_problems

SIZE = 3 << 20  # 3 MiB
RATE = 6 << 20  # sent at 6 MiB/s: the download lasts ~0.5 s, ten network samples
HTTP_OVERHEAD = 64 << 10  # headers, TCP/IP framing of ~50 packets per 64 KiB, ACKs


@pytest.fixture
def index(tmp_path: Path) -> PackageIndex:
    with package_index(tmp_path / "index", size_bytes=SIZE, rate_bps=RATE) as served:
        yield served  # type: ignore[misc]


def _download_task(make_task: MakeTask, index: PackageIndex) -> Path:
    return make_task("download", solve=index.download_command())


def _with_network(task_root: Path) -> None:
    toml = task_root / "task.toml"
    text = toml.read_text().replace("[environment]\n", "[environment]\nallow_internet = true\n")
    toml.write_text(text)


def _iptables() -> str:
    return subprocess.run(["iptables-save"], capture_output=True, text=True).stdout


def _assert_download_counted(record: TrialRecord) -> None:
    assert record.outcome is Outcome.PASSED, (record.reason, record.agent_phase)
    agent = record.telemetry.network["agent"]
    assert SIZE <= agent.rx_bytes <= SIZE * 1.1 + HTTP_OVERHEAD
    assert 0 < agent.tx_bytes < SIZE // 10  # the request and the ACKs
    assert agent.throughput_bps is not None and agent.busy_s > 0
    # Busy time is a part of the trial's time, so the rate while busy is at least the average.
    assert agent.busy_s <= record.duration_s
    assert agent.throughput_bps >= (agent.rx_bytes + agent.tx_bytes) / record.duration_s
    trial = record.telemetry.network["trial"]
    assert trial.rx_bytes >= agent.rx_bytes
    health = record.telemetry.health
    assert health is not None and set(health.host_pressure) == {"cpu", "memory", "io"}
    assert all(p.over_s > 0 and p.some_stall_s >= 0 for p in health.host_pressure.values())
    assert health.steal_share is not None and 0 <= health.steal_share <= 1
    row = trials_frame([record]).iloc[0]  # what the analysis reads of it
    assert row["net_rx_bytes"] == trial.rx_bytes and row["net_throughput_bps"] > 0
    assert row["cpu_pressure_pct"] >= 0 and row["steal_pct"] >= 0
    print(
        f"{record.backend}: agent rx {agent.rx_bytes} B tx {agent.tx_bytes} B, busy "
        f"{agent.busy_s:.2f} s of {record.telemetry.phase_s['agent']:.2f} s, "
        f"{agent.throughput_bps / 2**20:.2f} MiB/s while busy (sent at {RATE / 2**20:.0f} MiB/s)"
    )


@pytest.mark.sandbox
def test_process_trial_download_is_counted_in_its_own_namespace(
    make_task: MakeTask, index: PackageIndex, tmp_path: Path
) -> None:
    root = _download_task(make_task, index)
    _with_network(root)
    run_id = f"net{os.getpid()}"
    out = tmp_path / "run"
    backend = get_backend("process", BackendOptions(run_id, out))
    (trial,) = plan_trials([load_task(root)], ["oracle"], [PRESETS["uncapped"]])
    try:
        record = run_trial(trial, backend, TrialContext(run_id, out, "process"),
                           admission_wait_s=0.0)
    finally:
        backend.reap(run_id)
    _assert_download_counted(record)
    assert record.telemetry.health is not None
    assert record.telemetry.health.admission_wait_s == 0.0
    assert not list(NETNS_DIR.glob(namespace_name(run_id, "") + "*"))
    assert f"levelfield:{run_id}:" not in _iptables()
    assert leftovers(run_id, out) == []


@pytest.mark.sandbox
def test_a_killed_trial_network_is_reaped_with_the_run(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The namespace, veth and NAT rules of a trial whose harness died go with `reap`."""
    root = make_task("idle", solve="sleep 30")
    _with_network(root)
    task = load_task(root)
    run_id = f"netkill{os.getpid()}"
    run_dir = tmp_path / "run"
    backend = get_backend("process", BackendOptions(run_id, run_dir))
    limits = plan_trials([task], ["oracle"], [PRESETS["strict"]])[0].limits
    box = backend.start(task, limits, trial_id="k1", trial_dir=run_dir / "trials" / "k1")
    host_if = box.network.host_if  # type: ignore[attr-defined]
    assert (NETNS_DIR / namespace_name(run_id, "k1")).exists()
    assert f"levelfield:{run_id}:k1" in _iptables()
    # As if the harness had died here: nothing closes the sandbox; the next invocation reaps.
    assert backend.reap(run_id) >= 2
    assert not (NETNS_DIR / namespace_name(run_id, "k1")).exists()
    assert f"levelfield:{run_id}:" not in _iptables()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert host_if not in links
    assert leftovers(run_id, run_dir) == []


@pytest.mark.sandbox
def test_index_probe_times_the_file_from_the_configured_index(index: PackageIndex) -> None:
    probe = probe_index(index.index_url, f"{index.project}/{index.filename}")
    assert probe.error is None, probe.error
    assert probe.bytes == SIZE
    assert probe.throughput_bps is not None and probe.throughput_bps > 0
    assert probe.duration_s >= SIZE / RATE * 0.9  # the server's pace bounds it from below
    missing = probe_index(index.index_url, f"{index.project}/nope.whl")
    assert missing.error is not None and missing.throughput_bps is None


@pytest.fixture
def podman_bases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Podman's bridge gives the container a namespace of its own, so its counters are the
    trial's; Docker without iptables shares the host's network, whose counters are everyone's."""
    from levelfield.sandbox import oci

    require(_engine_problems(ENGINES["podman"], "podman"), "the podman engine")
    monkeypatch.setenv("DOCKER_HOST", ENGINES["podman"])
    oci.build_offline_bases(log=lambda line: print(f"offline-bases: {line}"))


@pytest.mark.oci
@pytest.mark.usefixtures("podman_bases")
def test_oci_trial_download_is_counted_from_the_container_counters(
    make_task: MakeTask, index: PackageIndex, tmp_path: Path
) -> None:
    from levelfield.sandbox import oci

    root = _download_task(make_task, index)
    run_id = f"ocinet{os.getpid()}"
    backend = oci.OciBackend(BackendOptions(run_id, tmp_path / "run"))
    (trial,) = plan_trials([load_task(root)], ["oracle"], [PRESETS["uncapped"]])
    try:
        record = run_trial(trial, backend, TrialContext(run_id, tmp_path / "run", "oci"))
    finally:
        backend.reap(run_id)
    _assert_download_counted(record)


@pytest.mark.sandbox
def test_a_run_probes_the_configured_index_and_trials_record_it(
    make_task: MakeTask, index: PackageIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first trial starts the probe in the background and takes seconds, so the trials after
    it find the result in their host context; the run's metadata keeps every probe."""
    monkeypatch.setenv("PIP_INDEX_URL", index.index_url)
    root = make_task("slow", solve="sleep 3 && touch /app/done")
    out = tmp_path / "run"
    run(RunConfig(dataset=root, out=out, repeats=3,
                  index_probe_file=f"{index.project}/{index.filename}"))
    with reading(out) as store:
        probes = store.meta()["index_probes"]
        records = sorted(store.records(), key=lambda r: r.started_at)
    assert len(probes) == 1 and probes[0]["bytes"] == SIZE and probes[0]["error"] is None
    assert probes[0]["index_url"] == index.index_url
    seen = [r.telemetry.host.index_probe for r in records]
    assert seen[-1] is not None and seen[-1].bytes == SIZE
    assert trials_frame(records)["index_probe_bps"].iloc[-1] == seen[-1].throughput_bps


@pytest.mark.sandbox
@pytest.mark.slow
def test_kill_9_with_trial_networks_live_then_resume_leaves_none(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The harness dies with two networked trials in flight: their namespaces, veths and NAT
    rules outlive it, and the same command reaps them before it reruns those trials."""
    for name in ("a", "b"):
        root = make_task(name, solve="sleep 20; touch /app/done")
        _with_network(root)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "levelfield", "run", str(root.parent), "--out", str(out),
               "--concurrency", "2"]
    harness = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    live: list[Path] = []
    while len(live) < 2 and time.monotonic() < deadline:
        live = list(NETNS_DIR.glob(f"{NAME_PREFIX}*")) if NETNS_DIR.is_dir() else []
        live = [p for p in live if _is_ours(p, out)]
        time.sleep(0.1)
    assert len(live) == 2, "the trials never got their namespaces"
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    with reading(out) as store:
        run_id = store.meta()["run_id"]
    assert f"levelfield:{run_id}:" in _iptables()  # left behind by the dead harness
    for name in ("a", "b"):  # the rerun need not wait 20 s
        (root.parent / name / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    with reading(out) as store:
        assert sorted(r.task for r in store.records()) == ["a", "b"]
    assert not [p for p in NETNS_DIR.glob(namespace_name(run_id, "") + "*")]
    assert f"levelfield:{run_id}:" not in _iptables()
    assert leftovers(run_id, out) == []


def _is_ours(netns: Path, out: Path) -> bool:
    """A namespace of the run in `out` (its run id is in the store once the run has begun)."""
    try:
        with reading(out) as store:
            run_id = store.meta().get("run_id")
    except Exception:
        return False
    return bool(run_id) and netns.name.startswith(namespace_name(run_id, ""))


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_hidden_variable_section_takes_bandwidth_and_pressure_from_real_trials(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """40 trials download 1 MiB from an index that sends at 1, 4 and 16 MiB/s in turn, and pass
    at random: bandwidth varies within each task, so the fit takes it. Pressure is whatever this
    host went through: it is fitted only when its spread reaches the stated minimum, and named
    as left out when it is not fitted."""
    from levelfield.analysis.hidden import MIN_SPREAD
    from levelfield.analysis.summary import summarize
    from levelfield.analysis.table import load_run

    rates = [1 << 20, 4 << 20, 16 << 20]
    with package_index(tmp_path / "index", size_bytes=1 << 20, rate_bps=rates) as index:
        for name in ("a", "b"):
            coin = "[ $((RANDOM % 2)) -eq 0 ] && touch /app/done"
            root = make_task(name, solve=f"{index.fetch_command()} && {coin}")
            _with_network(root)
        out = tmp_path / "run"
        run(RunConfig(dataset=root.parent, out=out, repeats=20, concurrency=2,
                      index_probe_every_s=0))
    trials = load_run(out).trials
    assert trials["net_rx_bytes"].min() >= 1 << 20
    rates_seen = trials["net_throughput_bps"]
    assert rates_seen.quantile(0.9) / rates_seen.quantile(0.1) > 2
    hidden = summarize(trials, n_resamples=50).hidden
    assert hidden is not None and hidden.estimable, hidden
    fitted = {c.name for c in hidden.coefficients}
    assert "bandwidth_quantile" in fitted
    for name in ("cpu_pressure_pct", "io_pressure_pct"):
        values = trials[name].astype(float)
        spread = values.quantile(0.9) - values.quantile(0.1)
        left = any(line.startswith(f"{name}:") for line in hidden.left_out)
        assert (name in fitted) != left, (name, spread)  # fitted, or named as left out
        assert name not in fitted or spread >= MIN_SPREAD[name], (name, spread)
    print(f"fitted {sorted(fitted)}; left out {list(hidden.left_out)}")
