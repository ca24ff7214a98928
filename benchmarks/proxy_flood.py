"""Claim: whatever an agent sends through the model proxy, the harness's memory stays bounded
(goal: under 256 MiB) and a trial's recording stays within its cap (goal: the cap + 10 % on disk).

An agent that floods the proxy with model-call bodies (1 GiB in all by default: bodies just
under the proxy's per-call limit, as fast as loopback takes them), on 2 connections at once (as
many as the proxy holds bodies for: all relayed and recorded) and on 8 (the rest refused),
against one that sends nothing, in one run. Each side is a harness of its own (a fresh process:
the proxy, with the scripted model on loopback as its upstream in a process of its own,
recording conversation.jsonl into a run directory); the agent is another process, which
streams its bodies from a generator so that only the harness holds what it reads. Printed per
side: the harness's peak resident memory (the kernel's ru_maxrss), the run directory's size,
and how the calls were answered.

    .venv/bin/python benchmarks/proxy_flood.py [--gib 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

from pydantic import SecretStr

from levelfield.model_api._http import MAX_BODY_BYTES
from levelfield.model_api._recording import CONVERSATION_MAX_BYTES
from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.model_api.scripted_model import ScriptedModel, serve

KEY = "sk-benchmark-key-000000"
CHUNK = 1 << 20
GOAL_MEMORY = 256 << 20


def agent(port: int, path: str, token: str, total: int, connections: int) -> None:
    """The flooding agent: `total` bytes of model-call bodies, each under the per-call limit,
    `connections` at once; prints the answers' status lines, counted."""
    size = MAX_BODY_BYTES - (64 << 10)
    calls = max(1, total // size) if total else 0
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    work = iter(range(calls))

    def one() -> None:
        while True:
            with lock:
                if next(work, None) is None:
                    return
            status = _send(port, path, token, size)
            with lock:
                statuses[status] += 1

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"calls": calls, "bytes": calls * size, "statuses": dict(statuses)}))


def _send(port: int, path: str, token: str, size: int) -> str:
    head = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"'
    tail = b'"}]}'
    filler = size - len(head) - len(tail)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {token}\r\n"
        f"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
        f"content-length: {size}\r\nconnection: close\r\n\r\n"
    ).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
            conn.sendall(request + head)
            block = b"x" * CHUNK
            while filler > 0:
                conn.sendall(block[: min(CHUNK, filler)])
                filler -= CHUNK
            conn.sendall(tail)
            answer = conn.makefile("rb").readline().decode(errors="replace").split(" ")
            return answer[1] if len(answer) > 1 else "no answer"
    except OSError as exc:
        return f"connection {type(exc).__name__}"


def harness(total: int, connections: int) -> None:
    """One side: the proxy and its upstream here, the agent in a process of its own."""
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--upstream"], stdout=subprocess.PIPE, text=True
    )
    assert upstream.stdout is not None
    upstream_port = int(upstream.stdout.readline())
    with tempfile.TemporaryDirectory() as run_dir:
        conversation = Path(run_dir) / "conversation.jsonl"
        routes = [Route("anthropic", f"http://127.0.0.1:{upstream_port}", SecretStr(KEY))]
        with ModelProxy(routes, conversation=conversation) as proxy:
            port = proxy.listen()
            path = proxy.base_urls(port)["anthropic"].split(str(port), 1)[1] + "/v1/messages"
            argv = [sys.executable, __file__, "--agent", str(port), path, proxy.token]
            sent = subprocess.run(
                [*argv, str(total), str(connections)],
                capture_output=True,
                text=True,
                check=True,
            )
        disk = sum(p.stat().st_size for p in Path(run_dir).rglob("*") if p.is_file())
    upstream.kill()
    upstream.wait()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_bytes": peak, "disk_bytes": disk, **json.loads(sent.stdout)}))


def upstream() -> None:
    """The provider, in a process of its own (a real one is not in the harness's memory)."""
    server = serve(ScriptedModel(["echo hello"] * 100_000, require_key=KEY))
    print(server.port, flush=True)
    threading.Event().wait()


def side(total: int, connections: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--harness", str(total), str(connections)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(n: object) -> str:
    return f"{int(n) / (1 << 20):.0f} MiB"  # type: ignore[call-overload]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    total = int(args.gib * (1 << 30))
    quiet = side(0, 1)
    sides = {
        "sends nothing": quiet,
        # as many at once as the proxy holds bodies for: every call relayed and recorded
        "floods, 2 at once": side(total, 2),
        # more than it holds: the rest refused (429) before their bodies are read
        "floods, 8 at once": side(total, 8),
    }
    for name, seen in sides.items():
        print(
            f"agent {name:17s}: {seen['calls']} calls, {mib(seen['bytes'])} sent; harness peak "
            f"{mib(seen['peak_bytes'])}, run directory {mib(seen['disk_bytes'])}; "
            f"answers {seen['statuses']}"
        )
    base, cap = _int(quiet["peak_bytes"]), CONVERSATION_MAX_BYTES
    peak = max(_int(seen["peak_bytes"]) for seen in sides.values())
    disk = max(_int(seen["disk_bytes"]) for seen in sides.values())
    print(
        f"flood / nothing: harness memory at most {peak / base:.2f}x (+{mib(peak - base)}; goal "
        f"under {mib(GOAL_MEMORY)}: {'met' if peak < GOAL_MEMORY else 'NOT met'}); run "
        f"directory at most {mib(disk)} of a {mib(cap)} cap (goal the cap + 10 %: "
        f"{'met' if disk <= 1.1 * cap else 'NOT met'})"
    )


def _int(value: object) -> int:
    return int(value)  # type: ignore[call-overload]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--agent":
        port, path, token, total, connections = sys.argv[2:7]
        agent(int(port), path, token, int(total), int(connections))
    elif len(sys.argv) > 1 and sys.argv[1] == "--upstream":
        upstream()
    elif len(sys.argv) > 1 and sys.argv[1] == "--harness":
        harness(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
