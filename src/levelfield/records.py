"""What the store keeps of a trial: its outcome, reason, evidence and telemetry.

Schema rule: a record without `schema_version` is version 1; an unknown version is refused rather
than misread; a future version 2 comes with a pure `upgrade_v1_to_v2` here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# An evidence note: an agent died by SIGKILL (exit 137, the shell's "Killed") with nothing to say
# why: an OOM kill or any other kill. Imports write it (harbor/beside.py), reports count it.
KILLED_CAUSE_UNKNOWN = "killed, cause unknown"
# An evidence note: an imported trial is an infra error only because its exception matched no row
# of the import's table (harbor/reasons.py). The leaderboard shows how much a clean score rests
# on such trials.
UNCLASSIFIED = "unclassified exception"


DEFAULT_WINDOW = "default"  # the time window of a run that names none


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    INFRA_ERROR = "infra_error"


class Reason(StrEnum):
    TESTS_PASSED = "tests_passed"
    TESTS_FAILED = "tests_failed"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    OOM_KILLED = "oom_killed"
    PIDS_EXHAUSTED = "pids_exhausted"
    STORAGE_EXHAUSTED = "storage_exhausted"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_ERROR = "verifier_error"
    GRADER_BROKEN = "grader_broken"
    AGENT_SETUP_FAILED = "agent_setup_failed"
    SANDBOX_ERROR = "sandbox_error"
    HOST_PRESSURE = "host_pressure"
    NODE_LOST = "node_lost"
    API_ERROR = "api_error"
    HARNESS_ERROR = "harness_error"
    GRADER_TAMPERED = "grader_tampered"
    BUDGET_EXHAUSTED = "budget_exhausted"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PhaseResult(_Frozen):
    """One phase (agent or verifier) as the sandbox saw it."""

    exit_code: int | None = Field(None, description="None when killed by the harness's timeout.")
    signal: int | None = Field(None, description="Signal that ended the phase's main process.")
    timed_out: bool = False
    duration_s: float = 0.0
    output_tail: str = Field("", description="Last lines of stdout+stderr, for the reader.")


class Evidence(_Frozen):
    """Kernel counters and exit facts that back the reason. Read before the cgroup is removed."""

    oom_kills: int = Field(
        0, description="cgroup OOM kills (v1 memory.oom_control, v2 memory.events)."
    )
    memory_failcnt: int = Field(
        0, description="Times usage hit the memory ceiling (v1 failcnt, v2 max)."
    )
    memory_peak_bytes: int | None = None
    pids_max_hits: int = Field(
        0, description="Forks refused at the pids ceiling (pids.events max)."
    )
    cpu_nr_periods: int = 0
    cpu_throttled_periods: int = 0
    cpu_throttled_s: float = 0.0
    cpu_usage_s: float | None = None
    storage_used_bytes: int | None = None
    storage_ceiling_bytes: int | None = None
    storage_full: bool = Field(False, description="Free space fell to ~0 at some point.")
    storage_written_bytes: int | None = Field(
        None,
        description="What the trial's disk image ever held (its allocation on the host): an "
        "upper bound on its peak use, since freed blocks stay allocated.",
    )
    host_disk_free_min_bytes: int | None = Field(
        None,
        description="Least free space seen on the host filesystem taking the trial's uncapped "
        "writes (process: its workspace; oci: the container's writable layer).",
    )
    host_disk_full: bool = Field(
        False, description="That filesystem ran out: the host's or the engine's disk, no ceiling."
    )
    sandbox_alive: bool = Field(True, description="Whether the sandbox's init survived the trial.")
    engine_oom_killed: bool | None = Field(
        None,
        description="oci: the engine's own OOMKilled flag, kept beside the cgroup counter "
        "(Docker sets it; Podman on cgroup v1 does not). None on process.",
    )
    host_oom_kills: int | None = Field(
        None,
        description="OOM kills anywhere on the host while the trial ran (/proc/vmstat "
        "oom_kill); None when not read (a remote engine).",
    )
    outside_oom_kills: int = Field(
        0,
        description="Kills of the trial's processes at a limit not its own ceiling (the host "
        "ran out, or a parent cgroup's limit), from the kernel log; oom_kills counts them too.",
    )
    held_oom_kills: int = Field(
        0,
        description="OOM kills of processes the agent left running, while they were held apart "
        "from the grader within what the agent had left of its ceiling: theirs, not counted in "
        "oom_kills.",
    )
    held_pids_max_hits: int = Field(
        0,
        description="Forks refused to those held processes at their own bound; not counted in "
        "pids_max_hits.",
    )
    tampered: tuple[str, ...] = Field(
        (),
        description="What of the grader the agent changed, or which process not the grader's "
        "touched its files: the facts behind grader_tampered.",
    )
    left_running: tuple[str, ...] = Field(
        (),
        description="Processes the agent left running when grading began (pid in the sandbox, "
        "command line, what it listened on): they ran beside the grader, apart from it, and "
        "ended with the sandbox.",
    )
    filled_beside: str | None = Field(
        None,
        description="The disk filled while the grader ran beside processes the agent left "
        "running, which write to the same work state: why the full disk is no infra error.",
    )
    notes: tuple[str, ...] = ()


class Sample(_Frozen):
    t_s: float
    memory_bytes: int
    cpu_usage_s: float


class IndexProbe(_Frozen):
    """A timed download of one fixed file from the package index this host is configured to use:
    the egress bandwidth a trial's installs meet, measured beside the trials, not inside them."""

    index_url: str = Field(description="Without credentials.")
    file_url: str = ""
    at: str = Field(description="UTC, ISO 8601, when the download started.")
    bytes: int = 0
    duration_s: float = 0.0
    throughput_bps: float | None = Field(None, description="Bytes per second; None on error.")
    error: str | None = None


class HostContext(_Frozen):
    """The host as the trial found it: the hidden variables a report may regress on."""

    host_id: str
    started_at: str = Field(description="UTC, ISO 8601.")
    local_hour: int
    load1: float | None = Field(None, description="1-minute load average; None when unknown.")
    free_memory_bytes: int
    trials_in_flight: int
    node: str | None = None
    index_probe: IndexProbe | None = Field(None, description="The run's latest index probe.")


class NetworkUse(_Frozen):
    """A trial's own traffic in one phase (loopback excluded). `busy_s` counts the sampling
    intervals in which bytes moved, so `throughput_bps` is the rate while the network was in
    use, not diluted by the phase's idle time (a lower bound at the sampling resolution)."""

    rx_bytes: int = 0
    tx_bytes: int = 0
    busy_s: float = 0.0
    throughput_bps: float | None = Field(None, description="(rx + tx) / busy_s; None if idle.")


class PressureUse(_Frozen):
    """One PSI file (cpu, memory or io) over a trial: avg10 (percent) at its end, and the stall
    time its `total` counter grew by while the trial ran."""

    some_avg10: float
    some_stall_s: float
    full_avg10: float | None = None
    full_stall_s: float | None = None
    over_s: float = Field(0.0, description="Wall time the totals were taken over.")


class Health(_Frozen):
    """The host's health while the trial ran: what a score can move with, not the trial's doing."""

    host_pressure: dict[str, PressureUse] = Field(
        default_factory=dict, description="/proc/pressure/{cpu,memory,io}."
    )
    cgroup_pressure: dict[str, PressureUse] = Field(
        default_factory=dict, description="The trial cgroup's own pressure files (cgroup v2)."
    )
    steal_share: float | None = Field(
        None, description="Share of all CPU time stolen by the hypervisor (/proc/stat)."
    )
    admission_wait_s: float | None = Field(
        None, description="Time the trial waited for its floor to be admitted."
    )


class Telemetry(_Frozen):
    host: HostContext
    samples: tuple[Sample, ...] = ()
    phase_s: dict[str, float] = Field(default_factory=dict)
    sample_every_s: float = 0.0
    network: dict[str, NetworkUse] = Field(
        default_factory=dict, description="Per phase (start, agent, verifier) and `trial`."
    )
    health: Health | None = None


class ModelBudget(_Frozen):
    """What one trial's model calls may spend: part of the configuration a score is reported
    under, like the resource ceilings. Kept by whoever sees the calls (`model_api.budget`)."""

    max_tokens: int | None = Field(
        None, ge=1, description="Tokens in + out over the trial's model calls; None: no ceiling."
    )
    max_cost_usd: float | None = Field(
        None, gt=0, description="US dollars at the price table (--prices); None: no ceiling."
    )

    @property
    def is_set(self) -> bool:
        return self.max_tokens is not None or self.max_cost_usd is not None

    def describe(self) -> str:
        """As the reports print it: `200,000 tokens, $0.5`, or `none`."""
        parts = []
        if self.max_tokens is not None:
            parts.append(f"{self.max_tokens:,} tokens")
        if self.max_cost_usd is not None:
            parts.append(f"${self.max_cost_usd:g}")
        return ", ".join(parts) or "none"


class ApiCall(_Frozen):
    """One request to a model API, as the terminal agent made it or the proxy relayed it for a
    CLI agent (keys never recorded), or an attempt the proxy refused."""

    started_at: str = Field(description="UTC, ISO 8601.")
    latency_s: float
    attempt: int = Field(description="1 for the first try of a turn, 2+ for retries.")
    status: int | None = Field(None, description="HTTP status; None when no response came.")
    outcome: Literal[
        "ok",
        "rate_limited",
        "overloaded",
        "server_error",
        "client_error",
        "connection_error",
        "cut_short",  # the agent's side ended it before the answer was whole (outcome.py)
        "refused",  # not a model call the proxy carries (model_api/allowlist.py): never relayed
        "budget_exhausted",  # the trial's model budget was spent (model_api/budget.py)
    ]
    tokens_in: int | None = None
    tokens_out: int | None = None
    endpoint: str | None = Field(None, description="API path, e.g. /v1/messages.")
    method: str | None = Field(None, description="HTTP method, as the agent sent it.")
    first_token_s: float | None = Field(
        None, description="Time to the first content; the whole latency when not streamed."
    )
    streamed: bool = False
    retry_after_s: float | None = Field(None, description="What a 429 or 529 asked to wait.")
    error: str | None = Field(
        None,
        description="What went wrong where the status does not say it: an error event in a "
        "200 stream, a stream broken off, a call the agent cut short.",
    )


class ImageRecord(_Frozen):
    """The image an oci trial ran: scores on a pinned prebuilt image and on a fresh build of
    the Dockerfile are not comparable, so every trial says which it had."""

    name: str = Field(description="The task's docker_image, or levelfield/<task>:<hash>.")
    digest: str = Field(description="Registry digest (sha256:...) if prebuilt; else the ID.")
    source: Literal["built", "pulled", "present"] = Field(
        description="built from environment/; pulled from its registry; present in the engine "
        "already and the registry not reached."
    )
    stand_in: str | None = Field(None, description="The offline base it was built on, if any.")


class HarborFacts(_Frozen):
    """What Harbor's result.json said of a trial that levelfield did not run: kept as given, so
    that the verdict can be re-derived and the submission's setup compared with others'."""

    submission: str = Field(description="The label the trial was imported under.")
    job: str = Field(description="Harbor's job folder the trial was found in.")
    trial_name: str
    trial_id: str | None = Field(None, description="Harbor's `id` of the trial.")
    task_name: str = Field(description="The task as Harbor named it, before normalising.")
    task_checksum: str | None = None
    dataset: str | None = Field(None, description="Harbor's `source`, e.g. terminal-bench.")
    agent_name: str | None = None
    agent_version: str | None = None
    model: str | None = Field(None, description="agent_info.model_info, else config's model.")
    sandbox_provider: str | None = Field(
        None, description="config.environment.type: docker, daytona, modal, e2b, runloop..."
    )
    timeout_multiplier: float | None = None
    overrides: dict[str, float | None] = Field(
        default_factory=dict,
        description="The timeouts and resources the submitter set instead of the task's "
        "(override_/max_timeout_sec of agent and verifier, override_cpus/memory_mb/storage_mb); "
        "only those set.",
    )
    phase_s: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds per phase (environment_setup, agent_setup, agent_execution, "
        "verifier) from Harbor's start and end times; a phase without both is absent.",
    )
    rewards: dict[str, float | None] | None = Field(
        None, description="verifier_result.rewards; None when nothing was graded."
    )
    exception_type: str | None = None
    exception_message: str | None = Field(
        None, description="Shortened, with secrets the agent's command line held masked."
    )
    exception_at: str | None = None


class AgentSetup(_Frozen):
    """How a CLI agent came to be in the sandbox, apart from its run: an install that the memory
    ceiling kills is a different event from an agent that runs out of memory."""

    mode: Literal["sandbox", "mounted"] = Field(
        description="sandbox: installed inside the trial under its limits; mounted: prepared "
        "once on the host and bound read-only into the sandbox."
    )
    package: str | None = Field(None, description="npm package and version asked for.")
    agent_version: str | None = Field(None, description="What the agent's version command said.")
    runtime: str | None = Field(None, description="The Node.js that runs it, and where from.")
    phase: PhaseResult | None = Field(None, description="The in-sandbox install; None if mounted.")
    memory_peak_bytes: int | None = Field(
        None, description="The trial's peak memory when the setup ended: the install's cost."
    )
    tree_path: str | None = Field(None, description="mounted: the prepared tree on the host.")
    tree_sha256: str | None = Field(None, description="mounted: content hash of that tree.")

    @property
    def failed(self) -> bool:
        return self.phase is not None and (self.phase.timed_out or self.phase.exit_code != 0)


class AgentReport(_Frozen):
    """What a CLI agent said about its own run (Claude Code's stream-json result, Codex's JSON
    events, Gemini CLI's JSON output); None fields are what it did not report."""

    exit_code: int | None = None
    status: str | None = Field(None, description="The CLI's own final status word.")
    turns: int | None = None
    cost_usd: float | None = None
    api_failure: bool = Field(False, description="It reported that its model API failed.")
    message: str | None = Field(None, description="Its final or error message, shortened.")


class CeilingHitNote(_Frozen):
    """A ceiling the kernel enforced during one exec of a hosted sandbox, and what was done."""

    exception: str = Field(description="The levelfield exception type, e.g. LevelfieldOOMKilled.")
    message: str
    command: str = Field(description="The exec's command, shortened and with secrets masked.")
    exit_code: int | None
    raised: bool = Field(
        description="Raised from the exec (it failed), or at the trial's end when it did not "
        "pass; false when the agent recovered and the trial passed."
    )


class TrialRecord(_Frozen):
    schema_version: Literal[1] = 1
    trial_key: str = Field(description="Deterministic: resume skips stored keys.")
    run_id: str
    task: str
    agent: str
    policy: str
    repeat: int
    window: str = DEFAULT_WINDOW
    attempt: int = 1
    concurrency: int = Field(1, description="Trials the executor allowed in flight at once.")
    backend: str
    outcome: Outcome
    reason: Reason
    reward: float | None = None
    error: str | None = Field(
        None, description="Exception type and message when one ended the trial."
    )
    limits: dict[str, Any]
    agent_phase: PhaseResult | None = None
    verifier_phase: PhaseResult | None = None
    evidence: Evidence
    telemetry: Telemetry
    api_calls: tuple[ApiCall, ...] = ()
    trajectory: str | None = Field(
        None,
        description="The recorded trajectory an agent drew for this trial (population); "
        "the same for every policy at the same task, repeat and window.",
    )
    image: ImageRecord | None = Field(None, description="oci: the image the trial ran.")
    agent_setup: AgentSetup | None = None
    agent_report: AgentReport | None = None
    harbor: HarborFacts | None = Field(
        None, description="Imported from Harbor: what its result.json said of the trial."
    )
    limits_disclosed: bool = Field(
        False, description="The agent was told its floor and ceiling (a factor of the trial)."
    )
    budget: ModelBudget | None = Field(
        None, description="The model budget its calls were held to; None: no ceiling."
    )
    spec: dict[str, float] | None = Field(
        None, description="The task's spec (cpus, memory_bytes, storage_bytes): the 1x."
    )
    policy_bounds: dict[str, dict[str, str | None]] | None = Field(
        None, description="Floor and ceiling per resource, as the policy states them."
    )
    enforcement: str | None = Field(
        None, description="How the backend enforced each floor and ceiling."
    )
    ceiling_hits: tuple[CeilingHitNote, ...] = Field(
        (), description="A hosted sandbox's: each ceiling the kernel enforced during an exec."
    )
    execs: int | None = Field(None, description="A hosted sandbox's: the harness's exec calls.")
    started_at: str
    finished_at: str
    duration_s: float
    tokens_in: int | None = Field(None, description="Input tokens over the trial's API calls.")
    tokens_out: int | None = Field(None, description="Output tokens over the trial's API calls.")
    cost_usd: float | None = Field(
        None, description="Tokens × the model's price (--prices); None when not priced."
    )
