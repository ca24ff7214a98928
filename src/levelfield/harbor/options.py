"""`--ek key=value` of `harbor run -e levelfield.harbor:LevelfieldEnvironment` → a policy and a
backend, checked before Harbor starts a trial.

Harbor hands every `--ek` pair to the environment's constructor, after parsing each value as
JSON or a Python literal (`ceiling=none` arrives as the string "none", `ceiling=None` as None,
`uv_shim=true` as True). Harbor 0.25's base class swallows keys it does not know, so a misspelt
`--ek celing=3x` would vanish: here it is refused, with the keys this environment reads. Harbor
0.26 checks an environment's options itself before any trial is queued, against the model the
environment declares (`environment.py` declares this one).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from levelfield.errors import RunConfigError
from levelfield.hosted.options import DEFAULT_POLICY, HostedOptions
from levelfield.tasks import Spec

__all__ = ["DEFAULT_POLICY", "EnvironmentOptions", "parse_options", "spec_of"]
_MIB = 1024 * 1024


class EnvironmentOptions(HostedOptions):
    """What `--ek` may say to levelfield's Harbor environment."""


def parse_options(kwargs: dict[str, Any]) -> EnvironmentOptions:
    """`--ek` values as Harbor parsed them; None (`ceiling=None`) reads as uncapped."""
    try:
        return EnvironmentOptions.model_validate(kwargs)
    except ValidationError as exc:
        known = ", ".join(EnvironmentOptions.model_fields)
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()
        )
        raise RunConfigError(f"--ek: {problems} (this environment reads: {known})") from None


def spec_of(cpus: float | None, memory_mb: int | None, storage_mb: int | None, task: Spec) -> Spec:
    """The spec Harbor resolved (task.toml, then its --override-* flags) wins over the file's."""
    return Spec(
        cpus=float(cpus) if cpus else task.cpus,
        memory_bytes=memory_mb * _MIB if memory_mb else task.memory_bytes,
        storage_bytes=storage_mb * _MIB if storage_mb else task.storage_bytes,
    )
