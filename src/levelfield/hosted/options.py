"""What a user tells a hosted sandbox, whichever harness hosts it: the policy (or its floor and
ceiling), the backend, and the uv shim. Harbor's `--ek` options (`harbor/options.py`) and
Inspect's `SandboxConfig` (`inspect/config.py`) are this model; a bad value is refused when the
options are read, before any trial starts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from levelfield.errors import PolicyError
from levelfield.policy import DEFAULT_POLICY, Policy, policy_from_words

__all__ = ["DEFAULT_POLICY", "HostedOptions"]
_POLICY_KEYS = ("policy", "floor", "ceiling")


class HostedOptions(BaseModel):
    """A policy and a backend for the trials of another harness."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str | None = Field(
        None, description="strict, headroom, uncapped, a multiplier (3x) or FLOOR/CEILING."
    )
    floor: str | None = Field(
        None, description="1x, 2x, or absolute: memory=4g,cpus=2; alone, no ceiling."
    )
    ceiling: str | None = Field(
        None, description="3x, none, or absolute: memory=8g; alone, floor 1x."
    )
    backend: Literal["auto", "process", "oci"] = Field(
        "auto", description="auto: oci for a task whose environment is an image, else process."
    )
    uv_shim: bool = Field(
        False, description="oci: place uv/uvx before the verifier (offline machines)."
    )

    @model_validator(mode="before")
    @classmethod
    def _none_means_uncapped(cls, data: Any) -> Any:
        """`ceiling=None` (Harbor parses `--ek ceiling=None` so) is uncapped, not "not given";
        a number (`policy=3`) is read as its text."""
        if not isinstance(data, dict):
            return data
        return {
            key: ("none" if value is None else str(value)) if key in _POLICY_KEYS else value
            for key, value in data.items()
        }

    @model_validator(mode="after")
    def _one_way_to_say_the_policy(self) -> HostedOptions:
        try:
            self.resolved_policy()
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        return self

    def resolved_policy(self) -> Policy:
        """The words read as `levelfield run` reads them (`policy_from_words`)."""
        return policy_from_words(self.policy, self.floor, self.ceiling)
