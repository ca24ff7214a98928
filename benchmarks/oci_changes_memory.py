"""Claim: the engine's diff costs the harness memory for what the grader reads, not for every
file the agent made.

One container of a stand-in base; the agent makes N empty files in /app (default 300,000).
Then the diff is read twice, in the same run: whole, as the docker SDK's `diff` reads it (the
JSON answer and a dict per entry), and as the sandbox reads it (`_changes`: streamed, kept where
the grader looks). Prints each read's peak of Python allocations (tracemalloc), its time, the
entries kept, and the ratio of the peaks. Needs an engine (DOCKER_HOST, scripts/oci_setup.sh)
and the stand-in bases (`levelfield images offline-bases`).

    python benchmarks/oci_changes_memory.py [N]
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import docker

from levelfield.sandbox.oci import _changes

KEEPALIVE = ["/bin/sh", "-c", "sleep 3600"]
BASE = "levelfield/stand-in-bookworm"


def measured(read: Callable[[], list[Any]]) -> tuple[int, float, int]:
    tracemalloc.start()
    started = time.monotonic()
    found = read()
    seconds = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, seconds, len(found)


def main() -> None:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    api = docker.from_env(timeout=600).api
    tags = [t for image in api.images(name=BASE) for t in image.get("RepoTags") or ()]
    if not tags:
        sys.exit(f"no {BASE} image here: run `levelfield images offline-bases` first")
    base = sorted(tags)[-1]
    container = api.create_container(base, KEEPALIVE, host_config=api.create_host_config(
        network_mode="none"))["Id"]  # fmt: skip
    try:
        api.start(container)
        make = f"mkdir /app && cd /app && seq {files} | xargs touch"
        api.exec_start(api.exec_create(container, ["sh", "-c", make])["Id"])
        whole = measured(lambda: [(c["Path"], c["Kind"]) for c in api.diff(container)])
        streamed = measured(lambda: _changes.container_changes(api, container))
    finally:
        api.remove_container(container, force=True)
    for name, (peak, seconds, kept) in (("whole (SDK)", whole), ("streamed", streamed)):
        print(f"{name:12} peak {peak / 2**20:7.1f} MiB  {seconds:5.2f} s  {kept:>8} entries")
    print(f"{files} files in /app: the streamed read peaks at {streamed[0] / whole[0]:.4f}x")


if __name__ == "__main__":
    main()
