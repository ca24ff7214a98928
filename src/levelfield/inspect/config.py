"""`SandboxConfig`: what an Inspect eval tells levelfield's sandbox, and the levelfield task a
sample runs as (its spec, and the environment to build).

Inspect hands a sandbox's configuration over as the object a task gave
(`sandbox=("levelfield", SandboxConfig(...))`), as the dict it logged, or as the text after the
colon of `--sandbox levelfield:TEXT`: a YAML or JSON file of these fields, the fields inline
(`policy=3x,backend=oci`), or a bare preset name or multiplier (`strict`, `3x`). A Harbor task
run through inspect-harbor brings its own folder (the sample's `task_dir`), hence its spec and
environment; `cpus`, `memory_mb` and `storage_mb` give a task without one its spec, and take the
place of a Harbor task's, as Harbor's `--override-*` do.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from levelfield.errors import RunConfigError
from levelfield.harbor.task_features import refuse_unsupported
from levelfield.hosted.options import HostedOptions
from levelfield.tasks import Spec, Task, load_task

_MIB = 1024 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
DEFAULT_TIMEOUT_S = 3600.0  # a plain Inspect task's phases: Inspect's own limits bound them


class SandboxConfig(HostedOptions):
    """levelfield's sandbox for Inspect: the policy (or floor and ceiling) and backend, and for
    a task without a spec of its own, the spec."""

    cpus: float | None = Field(None, gt=0, description="The spec's CPUs (the 1x).")
    memory_mb: int | None = Field(None, gt=0, description="The spec's memory in MiB.")
    storage_mb: int | None = Field(None, gt=0, description="The spec's disk in MiB.")
    image: str | None = Field(
        None, description="oci: the image a task without an environment of its own runs in."
    )


def sandbox_config(config: Any) -> SandboxConfig:
    """Whatever Inspect handed over → a SandboxConfig (RunConfigError names what is wrong)."""
    if isinstance(config, SandboxConfig):
        return config
    try:
        if config is None:
            return SandboxConfig()
        if isinstance(config, dict):
            return SandboxConfig.model_validate(config)
        if isinstance(config, str):
            return SandboxConfig.model_validate(_fields_of_text(config))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()
        )
        known = ", ".join(SandboxConfig.model_fields)
        raise RunConfigError(f"levelfield sandbox: {problems} (it reads: {known})") from None
    if isinstance(config, BaseModel):  # another sandbox's (a sample's compose file): not ours
        return SandboxConfig()
    raise RunConfigError(f"levelfield sandbox: cannot read a {type(config).__name__} config")


def _fields_of_text(text: str) -> dict[str, Any]:
    """A YAML/JSON file's fields, or inline `key=value,...` ones, or a bare preset name.
    Inspect makes a relative config text absolute against the task's folder before a sandbox
    sees it, so the inline fields start at the first path part holding an `=` (a policy's own
    slash, `policy=1x/2x`, stays), and a bare name is the last part."""
    path = Path(text).expanduser()
    if path.is_file():
        import yaml  # Inspect's own dependency: a config file is read where Inspect runs

        loaded = (json.loads if path.suffix == ".json" else yaml.safe_load)(path.read_text())
        if not isinstance(loaded, dict):
            raise RunConfigError(f"levelfield sandbox: {path} holds no mapping of fields")
        return loaded
    parts = text.split("/")
    first = next((i for i, part in enumerate(parts) if "=" in part), None)
    if first is None:
        return {"policy": parts[-1]} if parts[-1].strip() else {}
    fields: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in "/".join(parts[first:]).split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise RunConfigError(f"levelfield sandbox: '{item}' is not key=value (in '{text}')")
        fields[key.strip()] = value.strip()
    return fields


def task_of_sample(config: SandboxConfig, metadata: dict[str, Any], home: Path, name: str) -> Task:
    """The levelfield task an Inspect sample runs as. inspect-harbor's samples name their
    Harbor task folder (`task_dir`); any other sample gets a task made for it in `home`: the
    host's userland on process, `image` on oci. A task folder using a Harbor feature no backend
    runs (compose services, a separate grader, ...) raises its TaskError: the sample errs."""
    task_dir = metadata.get("task_dir")
    if task_dir:
        task = load_task(Path(task_dir))
        refuse_unsupported(task, config.backend)  # a Harbor feature no backend runs
        return _with_spec(task, config, task.spec)
    if config.memory_mb is None:
        raise RunConfigError(
            "levelfield sandbox: this sample names no task folder of its own (as inspect-harbor's "
            "do), so SandboxConfig must give its spec: memory_mb (and cpus, storage_mb)"
        )
    env = home / "environment"
    env.mkdir(parents=True, exist_ok=True)
    base = Task(
        name=name,
        path=home,
        spec=Spec(cpus=1.0, memory_bytes=config.memory_mb * _MIB, storage_bytes=1024 * _MIB),
        instruction="",
        agent_timeout_s=DEFAULT_TIMEOUT_S,
        verifier_timeout_s=DEFAULT_TIMEOUT_S,
        build_timeout_s=DEFAULT_TIMEOUT_S,
        workdir=PurePosixPath("/app") if config.image is None else PurePosixPath("/"),
        docker_image=config.image,
        userland="image" if config.image else "host",
    )
    return _with_spec(base, config, base.spec)


def _with_spec(task: Task, config: SandboxConfig, spec: Spec) -> Task:
    return dataclasses.replace(
        task,
        spec=Spec(
            cpus=float(config.cpus) if config.cpus else spec.cpus,
            memory_bytes=config.memory_mb * _MIB if config.memory_mb else spec.memory_bytes,
            storage_bytes=config.storage_mb * _MIB if config.storage_mb else spec.storage_bytes,
        ),
    )


def record_folder_name(sample_id: str, epoch: int, attempt: int) -> str:
    """A sample attempt's record folder, beside the log (`<log>.levelfield/<this>`)."""
    return f"{_UNSAFE.sub('_', sample_id)}__e{epoch}__a{attempt}"
