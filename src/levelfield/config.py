"""The run configuration: what `levelfield run` and `levelfield sweep` build from options or
`--config run.toml`. Unknown keys are refused, so a misspelt setting cannot vanish."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from levelfield.agents import AgentOptions, agent_name
from levelfield.errors import RunConfigError
from levelfield.network import DEFAULT_PROBE_FILE, PROBE_EVERY_S
from levelfield.policy import Policy, policy_from_words


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: Path = Field(description="Directory of Harbor-format tasks (or one task).")
    out: Path = Field(description="Run directory; the same command resumes it.")
    agents: list[str] = Field(
        default_factory=lambda: ["oracle"],
        description="oracle, nop, replay:NAME, replay:/path/{task}.json or population[:NAME].",
    )
    policies: list[str] = Field(
        default_factory=lambda: ["strict"],
        description="strict, headroom, uncapped, a multiplier (3x) or FLOOR/CEILING.",
    )
    floor: str | None = Field(
        None, description="One ad-hoc policy on every resource; alone, no ceiling."
    )
    ceiling: str | None = None
    repeats: int = Field(1, ge=1)
    concurrency: int = Field(1, ge=1)
    concurrency_levels: list[int] | None = Field(
        None,
        description="Trials in flight as a factor of the design: each level gets its own "
        "trials, run in alternating blocks.",
    )
    backend: str = Field(
        "auto",
        description="auto: a task whose environment is an image runs on oci, one declaring "
        'environment.userland = "host" on process; or process, or oci for every task.',
    )
    image: Literal["auto", "prebuilt", "build"] = Field(
        "auto",
        description="oci: prebuilt = task.toml's docker_image (pulled when absent); build = "
        "environment/; auto = prebuilt when present or pullable, else build.",
    )
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
    index_probe_every_s: float = Field(
        PROBE_EVERY_S,
        ge=0,
        description="Time a fixed download from the host's package index at most this often "
        "(seconds; 0 = never), recorded as host context.",
    )
    index_probe_file: str = Field(
        DEFAULT_PROBE_FILE, description="PROJECT/FILENAME the probe downloads from the index."
    )
    agent_options: AgentOptions = Field(
        default_factory=AgentOptions, description="Model, endpoint and commands of the agents."
    )
    prices: Path | None = Field(
        None,
        description="Price table (model → $ per million tokens in/out) that puts a cost on each "
        "trial; default: the prices.toml shipped with levelfield.",
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
        """Each policy named, or the one a floor/ceiling says, read as the hosted sandboxes read
        the same words (`policy_from_words`). Policies given beside a floor or ceiling are
        refused, not dropped."""
        if self.floor is not None or self.ceiling is not None:
            named = ",".join(self.policies) if "policies" in self.model_fields_set else None
            return [policy_from_words(named, self.floor, self.ceiling)]
        seen: dict[str, Policy] = {}
        for text in self.policies:
            for part in text.split(","):
                policy = policy_from_words(part)
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
