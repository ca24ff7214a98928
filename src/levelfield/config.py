"""The run configuration: what `levelfield run` and `levelfield sweep` build from options or
`--config run.toml`. Unknown keys are refused, so a misspelt setting cannot vanish."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from levelfield.agents import AgentOptions, agent_name
from levelfield.errors import RunConfigError
from levelfield.policy import Policy, policy_from_bounds, resolve_policy


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: Path = Field(description="Directory of Harbor-format tasks (or one task).")
    out: Path = Field(description="Run directory; the same command resumes it.")
    agents: list[str] = Field(
        default_factory=lambda: ["oracle"],
        description="oracle, nop, replay:NAME or replay:/path/{task}.json.",
    )
    policies: list[str] = Field(
        default_factory=lambda: ["strict"],
        description="strict, headroom, uncapped, a multiplier (3x) or FLOOR/CEILING.",
    )
    floor: str | None = Field(
        None, description="With ceiling: one ad-hoc policy on every resource."
    )
    ceiling: str | None = None
    repeats: int = Field(1, ge=1)
    concurrency: int = Field(1, ge=1)
    concurrency_levels: list[int] | None = Field(
        None,
        description="Trials in flight as a factor of the design: each level gets its own "
        "trials, run in alternating blocks.",
    )
    backend: str = "process"
    uv_shim: bool = Field(False, description="oci: place uv/uvx from PyPI before the verifier, "
                          "for offline machines where test.sh cannot download it.")
    executor: Literal["local", "ray"] = Field(
        "local", description="local: this machine; ray: a Ray cluster (levelfield[ray])."
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', HOST:6379, ray://HOST:10001); "
        "None joins $RAY_ADDRESS or starts Ray on this machine.",
    )
    ray_scratch_dir: Path | None = Field(
        None,
        description="Ray without a shared filesystem: node-local directory for trial "
        "directories, which come back to the run directory with each record.",
    )
    node_lost_retries: int = Field(
        1, ge=0, description="Ray: reruns a trial whose node died mid-trial; every attempt is kept."
    )
    seed: int = Field(0, description="Seeds the interleaved trial order (recorded).")
    window: str = Field("default", description="Label for this invocation's time window.")
    task_names: list[str] | None = Field(None, description="Only these tasks of the dataset.")
    agent_options: AgentOptions = Field(
        default_factory=AgentOptions, description="Model, endpoint and commands of the agents."
    )
    disclose_limits: Literal["off", "on", "both"] = Field(
        "off",
        description="Tell the agent its floor and ceiling (LEVELFIELD_* variables and one "
        "sentence in the instruction); both: a factor of the design, paired by task.",
    )

    def disclosure_levels(self) -> tuple[bool, ...]:
        return {"off": (False,), "on": (True,), "both": (False, True)}[self.disclose_limits]

    @field_validator("concurrency_levels")
    @classmethod
    def _levels_positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or min(value) < 1):
            raise ValueError("concurrency levels are positive integers, e.g. 1,2")
        return sorted(set(value)) if value else None

    @field_validator("agents", "policies")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one")
        return value

    def resolved_policies(self) -> list[Policy]:
        if self.floor is not None or self.ceiling is not None:
            return [policy_from_bounds(self.floor or "1x", self.ceiling)]
        seen: dict[str, Policy] = {}
        for text in self.policies:
            for part in text.split(","):
                policy = resolve_policy(part)
                seen.setdefault(policy.name, policy)
        return list(seen.values())

    def resolved_agents(self) -> list[str]:
        """Agent labels as stored: a model-driven agent carries its model ("terminal:gpt-4.1")."""
        specs = (a.strip() for text in self.agents for a in text.split(","))
        labelled = (s if ":" in s else agent_name(s, self.agent_options) for s in specs)
        return list(dict.fromkeys(labelled))


def load_run_config(path: Path, **overrides: object) -> RunConfig:
    """A TOML file with the same keys as the options; options given on the command line win."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RunConfigError(f"{path}: {exc}") from exc
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise RunConfigError(f"{path}: {exc}") from exc
