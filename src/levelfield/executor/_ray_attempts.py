"""Which attempts the Ray driver still wants: one token per attempt, in the cluster's own store.

A Ray task can begin on a node after the driver has given its attempt up: the node's raylet is
killed while the task is being handed over, the driver is told the node died and retries the
trial elsewhere, and the worker process, which outlives its raylet for about a second (Ray checks
the raylet's pid once a second), starts the trial anyway, creating a cgroup and a mounted disk
that nobody will close. So a worker claims its attempt's token before it creates anything, and
the driver revokes the token before it retries or cancels: both write the token with one atomic
put-if-absent into Ray's GCS key-value store, so exactly one of them wins. A worker that finds the
token revoked, or whose raylet is already gone, refuses and creates nothing. What a worker that
won the claim leaves when its node dies right after is reaped by the run's next reap on that host.
"""

from __future__ import annotations

import os
import uuid

NAMESPACE = "levelfield"
STARTED = b"started"
REVOKED = b"revoked"
_ROOT = "attempts"


def execution_prefix(run_id: str) -> str:
    """Tokens of one `execute` call: a resumed run never meets its killed predecessor's claims."""
    return f"{_ROOT}/{run_id}/{uuid.uuid4().hex[:12]}/"


def attempt_token(prefix: str, trial_key: str, attempt: int) -> str:
    return f"{prefix}{trial_key}/{attempt}"


def claim(token: str) -> bool:
    """On the worker: True when the attempt may start, False when the driver gave it up first."""
    from ray.experimental.internal_kv import _internal_kv_put

    already_there = _internal_kv_put(token, STARTED, overwrite=False, namespace=NAMESPACE)
    return not already_there


def revoke(token: str) -> bool:
    """On the driver: True when the worker had already claimed the attempt (it may have created
    a sandbox on its node), False when no worker will ever start it."""
    from ray.experimental.internal_kv import _internal_kv_put

    return bool(_internal_kv_put(token, REVOKED, overwrite=False, namespace=NAMESPACE))


def forget(token: str) -> None:
    """Once the worker has returned: it will never claim again. A revoked token is kept, since
    its worker may still be on its way; so are the few a killed driver left (a handful of bytes
    each in the GCS, never matched again: each execution has its own prefix)."""
    from ray.experimental.internal_kv import _internal_kv_del

    _internal_kv_del(token, namespace=NAMESPACE)


def raylet_gone() -> str | None:
    """Why this worker's raylet is gone, or None while it runs. Ray hands each worker its
    raylet's pid (RAY_RAYLET_PID); without it (not Linux) the token alone decides."""
    try:
        pid = int(os.environ.get("RAY_RAYLET_PID", "0"))
    except ValueError:
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"the raylet (pid {pid}) of this node is gone"
    except PermissionError:
        return None  # alive, owned by another user
    return None
