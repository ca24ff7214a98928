"""`harbor run -e levelfield.harbor:LevelfieldEnvironment`: Harbor's trials on levelfield's
sandboxes, under the limits a levelfield policy gives the task's spec.

    harbor run -p TASKS -a oracle -e levelfield.harbor:LevelfieldEnvironment \\
        --ek policy=strict|3x|uncapped|FLOOR/CEILING  (or --ek floor=1x --ek ceiling=3x) \\
        --ek backend=auto|process|oci [--ek uv_shim=true]

The only module that imports Harbor (the `harbor` extra, Python >= 3.12; Harbor 0.25 and 0.26).
Harbor stores whatever an environment raises in the trial's `exception_info`, so a ceiling the
kernel enforced is raised as a levelfield exception (`LevelfieldOOMKilled: memory ceiling 256 MiB
hit, oom_kill=1 ...`) instead of ending in a reward 0 that books the kill as the agent's failure.
Harbor calls `stop` before it writes result.json, which is where the levelfield record is written
beside it and where a kill the exec survived is raised if the trial did not pass (box.py says why).

Harbor 0.25 skipped the verifier after such an exception; 0.26 grades after any exception whose
type its error-policy table (`harbor/models/trial/error_policy.py`) does not mark "no grade", and a
type it does not know counts as graded with a valid reward. Two things keep a ceiling's kill out
of the grade on both: the box refuses the verifier's upload of /tests once a hit was raised (so
`verifier_result` stays null whatever the job's `override_error_policy` says), and the table
learns levelfield's sandbox errors as infrastructure's (retried, not graded, no valid reward),
which also keeps a late-raised kill's reward out of Harbor's own mean. Harbor keys that table by
type name and offers no way to add to it, so the entries are added to the mapping it reads at
each lookup. On 0.26 the `--ek` options are also declared (`options_model`), so Harbor
checks them in its preflight, before any trial is queued.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import (
    EnvironmentCapabilities,
    EnvironmentResourceCapabilities,
)
from harbor.models.task.config import NetworkMode
from harbor.models.trial.config import ResourceMode
from pydantic import ConfigDict

from levelfield import errors
from levelfield.errors import RunConfigError
from levelfield.harbor.box import ExecCall, HarborBox
from levelfield.harbor.options import EnvironmentOptions, parse_options, spec_of
from levelfield.harbor.task_features import refuse_unsupported
from levelfield.tasks import load_task
from levelfield.verifier import parse_reward_json, parse_reward_txt

_HARBOR_KEYS = frozenset(inspect.signature(BaseEnvironment.__init__).parameters)


def _declared_options() -> type[EnvironmentOptions] | None:
    """Harbor 0.26's options model for this environment: levelfield's options beside Harbor's
    own (auto_mounting); None on 0.25, which declares none."""
    try:
        from harbor.environments.options import EnvironmentOptions as HarborOptions
    except ImportError:
        return None

    class LevelfieldOptions(EnvironmentOptions, HarborOptions):  # type: ignore[misc, valid-type]
        model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    return LevelfieldOptions


def _teach_error_policies() -> None:
    """levelfield's sandbox errors (a ceiling hit, a sandbox that would not start or died) are
    infrastructure's: retried, not graded, no valid reward. Harbor 0.25's table says so by a
    cause (sandbox_failed), 0.26's by three flags. An entry Harbor already has stays."""
    try:
        from harbor.models.trial import error_policy as table
    except ImportError:  # older than 0.25: no table
        return
    fields = {f.name for f in dataclasses.fields(table.ErrorPolicy)}
    if "has_valid_reward" in fields:  # 0.26
        infra = table.ErrorPolicy(should_retry=True, should_grade=False, has_valid_reward=False)
    else:  # 0.25
        infra = table.ErrorPolicy(table.FailureCause.SANDBOX_FAILED, retry=True, grade=False)
    ours = {cls.__name__: infra for cls in _subclasses(errors.SandboxError)}
    table.ERROR_POLICIES = MappingProxyType({**ours, **table.ERROR_POLICIES})


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


_teach_error_policies()


class LevelfieldEnvironment(BaseEnvironment):
    """One Harbor trial in one levelfield sandbox (process: cgroups + bubblewrap; oci: a
    container via the Docker Engine API, podman or Docker)."""

    options_model: ClassVar[Any] = _declared_options()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        ours = {k: kwargs.pop(k) for k in list(kwargs) if k not in _HARBOR_KEYS}
        self._options = parse_options(ours)
        self._policy = self._options.resolved_policy()
        self._box: HarborBox | None = None
        if self.options_model is not None:  # Harbor 0.26 reads its own options from here
            harbor_own = {"auto_mounting": kwargs.get("auto_mounting", False)}
            self.options = self.options_model.model_validate({**ours, **harbor_own})
        super().__init__(*args, **kwargs)

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        """Before any trial is queued: the `--ek` options, with the keys this environment reads
        named when one is wrong (Harbor prints a ValueError and exits 1). Harbor 0.25 calls it
        without them: there the environment's constructor refuses them, trial by trial."""
        try:
            parse_options({k: v for k, v in (kwargs or {}).items() if k not in _HARBOR_KEYS})
        except RunConfigError as exc:
            raise ValueError(str(exc)) from None
        if "kwargs" in inspect.signature(BaseEnvironment.preflight).parameters:
            super().preflight(kwargs)  # type: ignore[misc]  # 0.26 checks options_model here
        else:
            super().preflight()  # type: ignore[misc]  # 0.25: credentials only, none here

    @staticmethod
    def type() -> str:
        return "levelfield"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        """Accepted so that Harbor asks no more; `_validate_definition` refuses any mode but
        auto: the levelfield policy, not `--cpus/--memory`, sets floor and ceiling."""
        return EnvironmentResourceCapabilities(
            cpu_limit=True, cpu_request=True, memory_limit=True, memory_request=True,
            fractional_cpus=True,
        )  # fmt: skip

    def _validate_definition(self) -> None:
        modes = (("--cpus", self._cpu_resource_mode), ("--memory", self._memory_resource_mode))
        for flag, mode in modes:
            if mode != ResourceMode.AUTO:
                raise RunConfigError(
                    f"{flag} {mode.value}: levelfield's environment takes its floor and ceiling "
                    "from --ek policy=... (or --ek floor=... --ek ceiling=...), not from Harbor's "
                    "enforcement modes; leave them at auto"
                )
        task = load_task(self.environment_dir.parent)
        spec = spec_of(
            self.task_env_config.cpus,
            self.task_env_config.memory_mb,
            self.task_env_config.storage_mb,
            task.spec,
        )
        allow = self.network_policy.network_mode != NetworkMode.NO_NETWORK
        self._task = dataclasses.replace(task, spec=spec, allow_internet=allow)

    async def start(self, force_build: bool) -> None:
        """`force_build` is moot: levelfield builds by the content of environment/ and reuses
        an image only when that content is unchanged. A task using a Harbor feature levelfield
        does not run (compose services, GPUs, ...) is refused here, before anything starts, so
        Harbor records the TaskError as the trial's exception instead of grading a sandbox
        that lacks the feature."""
        refuse_unsupported(self._task, self._options.backend)
        trial_dir = self.trial_paths.trial_dir.resolve()
        box = HarborBox(self._task, self._policy, self._options, trial_dir)
        await asyncio.to_thread(box.start)
        self._box = box

    async def stop(self, delete: bool) -> None:
        """The sandbox always goes (`delete` is moot); the record stays beside result.json."""
        box, self._box = self._box, None
        if box is None:
            return
        late = await asyncio.shield(asyncio.to_thread(box.stop, self._reward()))
        if late is not None:
            raise late

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        box = self._started()
        call = ExecCall(
            command,
            cwd=cwd or self.task_env_config.workdir,
            env=self._merge_env(env),
            timeout_s=timeout_sec,
            user=self._resolve_user(user),
        )
        number = box.number()
        try:
            output, code = await asyncio.to_thread(box.exec, call, number)
        except asyncio.CancelledError:
            await asyncio.shield(asyncio.to_thread(box.cancel, number))
            raise
        return ExecResult(stdout=output, stderr=None, return_code=code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await asyncio.to_thread(self._started().upload_file, Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(self._started().upload_dir, Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await asyncio.to_thread(self._started().download_file, source_path, Path(target_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._started().download_dir, source_dir, Path(target_dir))

    def _started(self) -> HarborBox:
        if self._box is None:
            raise RunConfigError("the levelfield environment was used before start()")
        return self._box

    def _reward(self) -> float | None:
        """The verifier's reward as Harbor downloaded it (it stops the environment after
        grading, before result.json): reward.txt, else reward.json; None if it graded nothing."""
        verifier = self.trial_paths.verifier_dir
        txt, js = verifier / "reward.txt", verifier / "reward.json"
        if txt.is_file():
            return parse_reward_txt(txt.read_text(errors="replace"))
        if js.is_file():
            return parse_reward_json(js.read_text(errors="replace"))
        return None
