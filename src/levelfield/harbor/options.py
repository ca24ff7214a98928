"""`--ek key=value` of `harbor run -e levelfield.harbor:LevelfieldEnvironment` → a policy and a
backend, checked before Harbor starts a trial.

Harbor hands every `--ek` pair to the environment's constructor, after parsing each value as
JSON or a Python literal (`ceiling=none` arrives as the string "none", `ceiling=None` as None,
`uv_shim=true` as True). Its own base class swallows keys it does not know, so a misspelt
`--ek celing=3x` would vanish: here it is refused, with the keys this environment reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from levelfield.errors import PolicyError, RunConfigError
from levelfield.policy import Policy, policy_from_bounds, resolve_policy
from levelfield.tasks import Spec

DEFAULT_POLICY = "strict"  # what Harbor's own `--memory limit` means: the spec is the ceiling
_MIB = 1024 * 1024


class EnvironmentOptions(BaseModel):
    """What `--ek` may say to levelfield's Harbor environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str | None = Field(
        None, description="strict, headroom, uncapped, a multiplier (3x) or FLOOR/CEILING."
    )
    floor: str | None = Field(None, description="1x, 2x, or absolute: memory=4g,cpus=2.")
    ceiling: str | None = Field(None, description="3x, none, or absolute: memory=8g.")
    backend: Literal["auto", "process", "oci"] = Field(
        "auto", description="auto: oci for a task whose environment is an image, else process."
    )
    uv_shim: bool = Field(
        False, description="oci: place uv/uvx before the verifier (offline machines)."
    )

    @model_validator(mode="after")
    def _one_way_to_say_the_policy(self) -> EnvironmentOptions:
        if self.policy is not None and (self.floor is not None or self.ceiling is not None):
            raise ValueError("give either policy=... or floor=.../ceiling=..., not both")
        return self

    def resolved_policy(self) -> Policy:
        if self.floor is not None or self.ceiling is not None:
            floor = self.floor or "1x"
            return policy_from_bounds(floor, self.ceiling or floor)
        return resolve_policy(self.policy or DEFAULT_POLICY)


def parse_options(kwargs: dict[str, Any]) -> EnvironmentOptions:
    """`--ek` values as Harbor parsed them; None (`ceiling=None`) reads as uncapped."""
    cleaned = {key: _text(key, value) for key, value in kwargs.items()}
    try:
        options = EnvironmentOptions.model_validate(cleaned)
    except ValidationError as exc:
        known = ", ".join(EnvironmentOptions.model_fields)
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors()
        )
        raise RunConfigError(f"--ek: {problems} (this environment reads: {known})") from None
    try:
        options.resolved_policy()
    except PolicyError as exc:
        raise RunConfigError(f"--ek: {exc}") from None
    return options


def _text(key: str, value: Any) -> Any:
    if key in ("policy", "floor", "ceiling"):
        return "none" if value is None else str(value)
    return value


def spec_of(cpus: float | None, memory_mb: int | None, storage_mb: int | None, task: Spec) -> Spec:
    """The spec Harbor resolved (task.toml, then its --override-* flags) wins over the file's."""
    return Spec(
        cpus=float(cpus) if cpus else task.cpus,
        memory_bytes=memory_mb * _MIB if memory_mb else task.memory_bytes,
        storage_bytes=storage_mb * _MIB if storage_mb else task.storage_bytes,
    )
