"""CLI agents run inside the sandbox: `command`, and presets for Claude Code, Codex and Gemini CLI.

Two install modes. `sandbox` (the default, as Harbor does it) installs the agent inside the trial,
under its limits, in a phase of its own (`agent_setup`) with its own timeout: on Terminal-Bench
an agent's own install is what the 1x memory ceiling kills first, so its memory counts, but an
install that fails is the infrastructure's failure, recorded apart from the agent's run. Where the
image has no Node.js (most Terminal-Bench images), the setup brings one: a tarball unpacked with
the image's own tar. `mounted` prepares the agent once per host (`_prepare.py`) and binds it
read-only into every sandbox: no install per trial, and the trial's memory is the agent's run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from levelfield.agents import (
    AgentOptions,
    AgentRun,
    DrawPoint,
    _cli_report,
    _egress,
    _prepare,
    agent_name,
)
from levelfield.agents._proxied import PRESET_PROVIDERS, proxied_api
from levelfield.errors import RunConfigError
from levelfield.model_api.providers import Provider, providers_for
from levelfield.records import AgentReport, AgentSetup, PhaseResult
from levelfield.sandbox import ReadOnlyMount, Sandbox
from levelfield.tasks import Task

INSTRUCTION_PATH = PurePosixPath("/logs/agent/instruction.md")
NODE_TARBALL = PurePosixPath("/tmp/levelfield-node.tar.gz")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOCAL_ENV = {
    "PATH": f"/root/.local/bin:{SYSTEM_PATH}",
    "NPM_CONFIG_PREFIX": "/root/.local",
    "PIP_USER": "1",
    "npm_config_update_notifier": "false",
}
_WITH_MODEL = '${LEVELFIELD_MODEL:+%s "$LEVELFIELD_MODEL"}'


@dataclass(frozen=True, slots=True)
class Preset:
    package: str  # on the npm registry
    command: str
    version_cmd: str
    key_envs: tuple[str, ...]  # the first is the one --api-key-env defaults to
    base_url_env: str
    state_dir: str  # the agent's own logs and session files under $HOME, kept with the trial
    min_node: int  # the major version its package.json's engines asks for
    quiet_env: tuple[tuple[str, str], ...] = ()  # no telemetry or update checks from a trial


PRESETS = {
    "claude-code": Preset(
        package="@anthropic-ai/claude-code",
        command="claude --print --output-format stream-json --verbose "
        "--dangerously-skip-permissions " + _WITH_MODEL % "--model" + ' "$LEVELFIELD_INSTRUCTION"',
        version_cmd="claude --version",
        key_envs=("ANTHROPIC_API_KEY",),
        base_url_env="ANTHROPIC_BASE_URL",
        state_dir=".claude",
        min_node=22,
        quiet_env=(
            ("IS_SANDBOX", "1"),  # lets --dangerously-skip-permissions run as root
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
        ),
    ),
    "codex": Preset(
        package="@openai/codex",
        # The proxy is a provider of its own: HTTP only (no WebSocket transport to fall back
        # from), its key read from OPENAI_API_KEY.
        command="codex exec --json --skip-git-repo-check "
        "--dangerously-bypass-approvals-and-sandbox "  # the trial's sandbox is the sandbox
        + _WITH_MODEL
        % "-m"
        + ' -c model_provider=levelfield -c \'model_providers.levelfield={name="levelfield", '
        'base_url="\'"$LEVELFIELD_BASE_URL"\'", env_key="OPENAI_API_KEY", '
        'wire_api="responses", supports_websockets=false}\''
        # Its built-in web_search runs on the provider's side: offered only when the task allows
        # internet (LEVELFIELD_WEB_SEARCH), as the proxy refuses it otherwise.
        ' -c \'web_search="\'"$LEVELFIELD_WEB_SEARCH"\'"\''
        ' "$LEVELFIELD_INSTRUCTION" </dev/null',
        version_cmd="codex --version",
        key_envs=("OPENAI_API_KEY", "CODEX_API_KEY"),
        base_url_env="OPENAI_BASE_URL",
        state_dir=".codex",
        min_node=16,
    ),
    "gemini-cli": Preset(
        package="@google/gemini-cli",
        # Without a selected auth type, a base URL makes it pick "gateway", which it then refuses.
        command="mkdir -p ~/.gemini && { [ -e ~/.gemini/settings.json ] || echo "
        '\'{"security":{"auth":{"selectedType":"gemini-api-key"}}}\' '
        "> ~/.gemini/settings.json; } && gemini --output-format json --yolo "
        + _WITH_MODEL % "-m"
        + ' -p "$LEVELFIELD_INSTRUCTION" </dev/null',
        version_cmd="gemini --version",
        key_envs=("GEMINI_API_KEY",),
        base_url_env="GOOGLE_GEMINI_BASE_URL",
        state_dir=".gemini",
        min_node=20,
        quiet_env=(("GEMINI_CLI_TRUST_WORKSPACE", "true"),),
    ),
}


def unproxied_environment(options: AgentOptions) -> dict[str, str]:
    """A `command` agent given no key: its model and endpoint, as given. Any agent given a key
    is proxied (`_proxied.py`) and gets the proxy's URLs and a dummy token instead."""
    env: dict[str, str] = {}
    if options.model:
        env["LEVELFIELD_MODEL"] = options.model
    if options.base_url:
        env["LEVELFIELD_BASE_URL"] = options.base_url
    return env


def command_agent(kind: str, spec: str, options: AgentOptions) -> CommandAgent:
    preset = PRESETS.get(kind)
    command = options.command or (preset.command if preset else None)
    if not command:
        raise RunConfigError("the command agent needs --agent-cmd (and usually --agent-install)")
    if options.install_mode == "mounted" and (preset is None or options.install):
        raise RunConfigError(
            "--agent-install-mode mounted prepares a preset's npm package on the host: use "
            f"{', '.join(PRESETS)}, or the sandbox mode with --agent-install"
        )
    _egress.check()  # the host's proxy must be one its relay can serve
    return CommandAgent(
        name=spec if ":" in spec else agent_name(kind, options),
        install=options.install,
        command=command,
        key_env=options.api_key_env or (preset.key_envs[0] if preset else None),
        preset=preset,
        kind=kind,
        options=options,
    )


_TREES: dict[tuple[str, str | None], _prepare.PreparedTree] = {}
_TREES_LOCK = threading.Lock()


def prepared_tree(preset: Preset, version: str | None) -> _prepare.PreparedTree:
    """Once per process and agent version; the cache on disk makes it once per host."""
    with _TREES_LOCK:
        key = (preset.package, version)
        if key not in _TREES:
            _TREES[key] = _prepare.prepare_tree(preset.package, version, preset.version_cmd)
        return _TREES[key]


@dataclass(frozen=True)
class CommandAgent:
    name: str
    install: str | None
    command: str
    key_env: str | None
    preset: Preset | None
    kind: str
    options: AgentOptions

    @property
    def needs_network(self) -> bool:
        """The outside network, whatever the task says: for an install in the sandbox (its
        package registry), or when asked for (--agent-network). The model API is reached
        through the proxy on the sandbox's own loopback, so a key needs none, and otherwise
        the task's setting holds."""
        installs = self.install is not None or (self.preset is not None and not self.is_mounted)
        return installs or self.options.network

    def providers(self) -> tuple[Provider, ...]:
        """The APIs the proxy relays for it: a preset's own; a `command` agent's when it is
        given a key (none otherwise: it is run as it is, with no key to keep from it)."""
        if self.kind in PRESET_PROVIDERS:
            return PRESET_PROVIDERS[self.kind]
        if self.options.api_key(self.key_env) is None:
            return ()
        return providers_for(self.key_env)

    def check(self, tasks: object) -> None:
        """A model budget holds the calls levelfield sees: a `command` agent given no key is
        run as it is, its calls out of the proxy's sight, so a budget on it is refused."""
        if self.options.budget.is_set and not self.providers():
            raise RunConfigError(
                f"agent {self.name}: a model budget (--max-tokens-per-trial, "
                "--max-cost-per-trial) is kept by the proxy, which relays only an agent given "
                "its key: add --api-key-env or --api-key-file"
            )

    @property
    def setup_timeout_s(self) -> float:
        return self.options.setup_timeout_s

    @property
    def is_mounted(self) -> bool:
        return self.options.install_mode == "mounted" and self.preset is not None

    def mounts(self) -> tuple[ReadOnlyMount, ...]:
        if not self.is_mounted:
            return ()
        assert self.preset is not None
        tree = prepared_tree(self.preset, self.options.agent_version)
        return (ReadOnlyMount(tree.path, _prepare.TREE_IN_SANDBOX),)

    def key_envs(self) -> tuple[str, ...]:
        if self.preset is not None:
            return self.preset.key_envs
        return (self.key_env,) if self.key_env else ()

    def environment(self, task: Task, proxy_env: dict[str, str] | None = None) -> dict[str, str]:
        """The sandbox's environment. A proxied agent's holds the proxy's URLs and dummy token
        (`proxy_env`, in its run) and never the key; its setup gets neither. No agent's holds
        the key."""
        path = LOCAL_ENV["PATH"]
        if self.is_mounted:
            path = f"{_prepare.TREE_IN_SANDBOX}/bin:{path}"
        env = {
            **LOCAL_ENV,
            "PATH": path,
            "LEVELFIELD_INSTRUCTION": task.instruction,
            "LEVELFIELD_INSTRUCTION_FILE": str(INSTRUCTION_PATH),
            "LEVELFIELD_WEB_SEARCH": "live" if task.allow_internet is True else "disabled",
            **dict(self.preset.quiet_env if self.preset else ()),
            **self.options.agent_env,
        }
        if self.providers():
            model = {"LEVELFIELD_MODEL": self.options.model} if self.options.model else {}
            return {**env, **model, **(proxy_env or {})}
        return {**env, **unproxied_environment(self.options)}

    # -- agent_setup -------------------------------------------------------------------------

    def setup(
        self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path
    ) -> AgentSetup | None:
        """None for a `command` agent with nothing to install."""
        if self.preset is None and not self.install:
            return None
        if self.is_mounted:
            assert self.preset is not None
            tree = prepared_tree(self.preset, self.options.agent_version)
            return AgentSetup(
                mode="mounted",
                package=tree.spec,
                agent_version=tree.agent_version,
                runtime=tree.runtime,
                tree_path=str(tree.path),
                tree_sha256=tree.sha256,
            )
        return self._install_in_sandbox(box, task, timeout_s=timeout_s, trial_dir=trial_dir)

    def _install_in_sandbox(
        self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path
    ) -> AgentSetup:
        with _network_env(box) as network:
            env = {**network, **self.environment(task)}
            return self._install(box, task, env, timeout_s, trial_dir)

    def _install(
        self, box: Sandbox, task: Task, env: dict[str, str], timeout_s: float, trial_dir: Path
    ) -> AgentSetup:
        log = trial_dir / "agent-setup.log"
        deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        runtime, phase = None, None
        package = None
        if self.preset is not None:
            runtime, phase = self._bring_node(box, env, log, deadline)
            version = self.options.agent_version or "latest"
            package = f"{self.preset.package}@{version}"
            install = self.install or f"npm install -g --no-audit --no-fund {package}"
        else:
            install = self.install
        said = None
        if install and (phase is None or _ok(phase)):
            phase = box.exec(install, timeout_s=_left(deadline), env=env, log_path=log)
            if _ok(phase) and self.preset is not None:
                check = box.exec(
                    self.preset.version_cmd, timeout_s=_left(deadline), env=env, log_path=log
                )
                said = _last_line(check.output_tail)
                phase = phase if _ok(check) else check  # installed, yet it does not start
        phase = (phase or PhaseResult(exit_code=0)).model_copy(
            update={"duration_s": time.monotonic() - started}
        )
        return AgentSetup(
            mode="sandbox",
            package=package,
            agent_version=said,
            runtime=runtime,
            phase=phase,
            memory_peak_bytes=box.evidence().memory_peak_bytes,
        )

    def _bring_node(
        self, box: Sandbox, env: dict[str, str], log: Path, deadline: float
    ) -> tuple[str, PhaseResult | None]:
        """The image's Node.js if new enough for the agent, else our tarball, unpacked in it."""
        assert self.preset is not None
        probe = box.exec(
            f"command -v npm >/dev/null && node -e 'process.exit(+process.versions.node"
            f'.split(".")[0] >= {self.preset.min_node} ? 0 : 1)\' && node --version',
            timeout_s=_left(deadline),
            env=env,
            log_path=log,
        )
        if _ok(probe):
            return f"node {_last_line(probe.output_tail)} (the image's)", None
        box.copy_in(_prepare.node_tarball(), NODE_TARBALL)
        unpack = box.exec(
            f'mkdir -p "$HOME/.local" && tar -xzf {NODE_TARBALL} -C "$HOME/.local" '
            f"&& rm -f {NODE_TARBALL} && node --version",
            timeout_s=_left(deadline),
            env=env,
            log_path=log,
        )
        return f"node {_prepare.NODE_VERSION} (brought in: {_prepare.NODE_WHEEL})", (
            None if _ok(unpack) else unpack
        )

    # -- the agent's run ---------------------------------------------------------------------

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        instruction = trial_dir / "instruction.md"
        instruction.write_text(task.instruction)
        box.copy_in(instruction, INSTRUCTION_PATH)
        providers = self.providers()
        with _network_env(box) as network:
            if not providers:
                env = {**network, **self.environment(task)}
                return self._run(box, task, env, timeout_s, trial_dir)
            internet = task.allow_internet is True
            with proxied_api(
                providers, self.options, self.key_env, box, trial_dir, allow_internet=internet
            ) as api:
                env = {**network, **self.environment(task, api.environment(self.key_envs()))}
                run = self._run(box, task, env, timeout_s, trial_dir)
        # Read once the proxy has stopped listening: a call a process of the agent's made after
        # its phase ended, before the proxy closed, was answered and is the trial's to count.
        calls = tuple(api.proxy.calls)  # each as what it was, those in flight cut short
        steps = tuple(api.proxy.trajectory()) or run.steps  # the tool calls, as the proxy saw them
        return replace(run, steps=steps, api_calls=calls)

    def _run(
        self, box: Sandbox, task: Task, env: dict[str, str], timeout_s: float, trial_dir: Path
    ) -> AgentRun:
        log = trial_dir / "agent.log"
        offset = log.stat().st_size if log.exists() else 0
        phase = box.exec(self.command, timeout_s=timeout_s, env=env, log_path=log)
        launch = {
            "command": self.command,
            "delay_s": 0.0,
            "step": "run",
            "exit_code": phase.exit_code,
            "duration_s": round(phase.duration_s, 3),
        }
        report, commands = self._read_report(log, offset, phase)
        self._keep_state(box, trial_dir, env)
        return AgentRun(phase, commands or (launch,), report=report)

    def _read_report(
        self, log: Path, offset: int, phase: PhaseResult
    ) -> tuple[AgentReport, tuple[dict[str, object], ...]]:
        reader = _cli_report.READERS.get(self.kind)
        if reader is None:
            return AgentReport(exit_code=phase.exit_code), ()
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        reading = reader(text, phase.exit_code)
        return reading.report, reading.commands

    def _keep_state(self, box: Sandbox, trial_dir: Path, env: dict[str, str]) -> None:
        if self.preset is not None:
            box.exec(
                f"cp -r ~/{self.preset.state_dir} /logs/agent/ 2>/dev/null || true",
                timeout_s=30,
                env=env,
                log_path=trial_dir / "agent.log",
            )


@contextlib.contextmanager
def _network_env(box: Sandbox) -> Iterator[dict[str, str]]:
    """How the host reaches the network (its proxy, relayed from outside so that no credential
    enters; a TLS-inspecting CA), for a phase whose sandbox reaches it: so that npm and the
    agent reach their registry and API from the sandbox as the host does."""
    netns = box.network_namespace() if box.reaches_outside() else None
    if netns is None:
        yield {}
        return
    with _egress.relayed_environment(netns) as env:
        yield env


def _ok(phase: PhaseResult) -> bool:
    return not phase.timed_out and phase.exit_code == 0


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def create(spec: str, options: AgentOptions, at: DrawPoint) -> CommandAgent:
    return command_agent(spec.partition(":")[0], spec, options)


def label(kind: str, options: AgentOptions) -> str:
    if kind == "command":
        return f"command:{options.name or 'custom'}"
    return f"{kind}:{options.model}" if options.model else kind
