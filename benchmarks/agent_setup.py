"""Claim: `mounted` mode takes a CLI agent's install out of every trial. Per trial, `sandbox` mode
spends tens of seconds and hundreds of MB of the trial's memory in agent_setup (Node.js unpacked,
the npm package downloaded and installed); `mounted` spends nothing in the sandbox, once the host
has prepared the agent (a one-time cost, printed first, cached under /var/cache/levelfield/agents).

Measures the agent_setup phase alone, in a real sandbox of a Terminal-Bench 2.0 task (regex-log,
FROM ubuntu:24.04, no Node.js) under its 1x limits, on the backend named (process or oci).

    .venv/bin/python benchmarks/agent_setup.py [--backend oci] [--repeats 2] [claude-code ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from levelfield.agents import AgentOptions, make_agent
from levelfield.agents.command import PRESETS, prepared_tree
from levelfield.policy import PRESETS as POLICIES
from levelfield.policy import apply_policy
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.tasks import load_task

TB2_TASK = Path(__file__).resolve().parents[1].parent / "shared" / "tb2-sample" / "regex-log"


def setup_once(kind: str, mode: str, backend_name: str, run_dir: Path, i: int) -> tuple[float, int]:
    """Seconds of the agent_setup phase, and the trial's peak memory when it ended."""
    task = dataclasses.replace(load_task(TB2_TASK), allow_internet=True)  # npm's registry
    limits = apply_policy(POLICIES["strict"], task.spec)
    agent = make_agent(kind, AgentOptions(install_mode=mode))  # type: ignore[arg-type]
    backend = get_backend(backend_name, BackendOptions(f"bench-{i}", run_dir))
    trial_dir = run_dir / f"{kind}-{mode}-{i}"
    box = backend.start(
        task, limits, trial_id=trial_dir.name, trial_dir=trial_dir, mounts=agent.mounts()
    )  # type: ignore[attr-defined]
    try:
        t = time.monotonic()
        setup = agent.setup(box, task, timeout_s=600, trial_dir=trial_dir)  # type: ignore[attr-defined]
        elapsed = time.monotonic() - t
        if setup.failed:
            sys.exit(f"{kind} {mode}: setup failed: {setup.phase.output_tail[-500:]}")
        return elapsed, box.evidence().memory_peak_bytes or 0
    finally:
        box.close()
        backend.reap(f"bench-{i}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="*", default=list(PRESETS))
    parser.add_argument("--backend", default="process")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for kind in args.agents:
        t = time.monotonic()
        tree = prepared_tree(PRESETS[kind], None)
        print(f"{kind}: host preparation {time.monotonic() - t:.1f} s (0 when cached), {tree.spec}")
    with tempfile.TemporaryDirectory(prefix="lf-bench-") as tmp:
        for kind in args.agents:
            results = {}
            for mode in ("sandbox", "mounted"):
                runs = [
                    setup_once(kind, mode, args.backend, Path(tmp), i) for i in range(args.repeats)
                ]
                results[mode] = runs
                seconds = statistics.median(r[0] for r in runs)
                peak = statistics.median(r[1] for r in runs) / (1 << 20)
                print(f"{kind:12} {mode:8} agent_setup {seconds:6.2f} s  peak {peak:6.0f} MiB")
            saved = statistics.median(r[0] for r in results["sandbox"]) - statistics.median(
                r[0] for r in results["mounted"]
            )
            print(f"{kind:12} mounted saves {saved:.1f} s of agent_setup per trial")


if __name__ == "__main__":
    main()
