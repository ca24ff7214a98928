"""The engine's API, reconnecting: a restart of the API service must not fail or leak trials.

`podman system service` (and dockerd) can be restarted while containers keep running: podman's
containers and exec sessions live under conmon, not under the API service. Without care, every
call in that window fails with a connection error, so trials in flight are booked as errors,
trials starting then cannot start, and `close()` cannot remove its container, which then idles
until a later reap. Calls through `ReconnectingApi` wait for the service to answer again, up to
RECONNECT_S; after that the engine is gone for good and the error is the sandbox's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from levelfield.errors import SandboxDied

RECONNECT_S = 30.0  # podman system service answers again ~2 s after a restart (measured here)
RETRY_EVERY_S = 0.2


def _connection_errors() -> tuple[type[BaseException], ...]:
    import requests

    return (requests.exceptions.ConnectionError,)


class ReconnectingApi:
    """A `docker.APIClient` whose calls retry while the engine's socket does not answer."""

    def __init__(self, api: Any, reconnect_s: float = RECONNECT_S) -> None:
        self._api = api
        self._reconnect_s = reconnect_s
        self._errors = _connection_errors()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        if not callable(attr):
            return attr
        return self._reconnecting(attr)

    def _reconnecting(self, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def retried(*args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + self._reconnect_s
            while True:
                try:
                    return call(*args, **kwargs)
                except self._errors as exc:
                    if time.monotonic() >= deadline:
                        raise SandboxDied(
                            f"the container engine's API did not answer for "
                            f"{self._reconnect_s:g} s: {exc}"
                        ) from exc
                    time.sleep(RETRY_EVERY_S)

        return retried


def reconnecting(client: Any) -> Any:
    """Route a `docker.DockerClient`'s calls (its models use `client.api`) through the retry."""
    if not isinstance(client.api, ReconnectingApi):
        client.api = ReconnectingApi(client.api)
    return client
