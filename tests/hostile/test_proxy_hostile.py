"""A hostile `command` agent given a key cannot use it for anything but model calls, nor spend
past the trial's model budget; an honest agent under the budget passes.

One run per backend (`process`, and `oci` on Podman and on Docker), three trials in flight, the
proxy in front of a plain listener (`_witness.py`) that writes down whatever reaches it and hands
model calls to the scripted model, which checks that each carries the planted real key. The
agent's key variable names no provider, so the proxy routes all three (Anthropic, OpenAI,
Gemini), and the run has a token ceiling:
- `attacks` runs `_proxy_attacks.py` from the sandbox: every non-model path and method on each
  provider's route, and every trick meant to reach one through a model path;
- `spend` keeps calling Chat Completions with a large prompt, past the ceiling;
- `honest` solves its task in three model calls, well under the ceiling.
About 30 s on `process`, a minute on each engine.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.config import RunConfig
from levelfield.executor import run
from levelfield.model_api.scripted_model import ScriptedModel, serve
from levelfield.outcome import refusals
from levelfield.records import ModelBudget, Outcome, Reason, TrialRecord
from levelfield.store import reading

from ..conftest import missing_sandbox_prerequisites, require
from ..integration._witness import Witness, witness_upstream
from . import _proxy_attacks
from .test_hostile import BACKENDS, ENGINES, _engine_problems

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PLANTED_KEY = "sk-hostile-proxy-planted-51c0e7a9"
KEY_ENV = "LEVELFIELD_PROXY_HOSTILE_KEY"  # names no provider: the proxy routes all three
CEILING = 20_000
MINI_AGENT = Path(__file__).parents[1] / "integration" / "_mini_agent.py"
SPEND = """\
# spend: calls the model again and again, whatever it answers
import json, os, urllib.error, urllib.request
prompt = "Count the words of this sentence, please. " * 1000  # about 10,000 tokens a call
statuses = []
for _ in range(40):
    body = {"model": "scripted", "messages": [{"role": "user", "content": prompt}]}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["LEVELFIELD_API_KEY"],
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            statuses.append(answer.status)
    except urllib.error.HTTPError as refused:
        statuses.append(refused.code)
json.dump(statuses, open("/logs/agent/spend.json", "w"))
"""
HONEST = (
    "# honest: asks the model for the commands and runs them\n"
    'import os\nos.environ["OPENAI_API_KEY"] = os.environ["LEVELFIELD_API_KEY"]\n'
)
TASKS = {
    "attacks": Path(_proxy_attacks.__file__).read_text(),
    "spend": SPEND,
    "honest": HONEST + MINI_AGENT.read_text().replace("from __future__ import annotations\n", ""),
}


@dataclass
class ProxyRun:
    backend: str
    run_dir: Path
    records: dict[str, TrialRecord]
    witness: Witness
    model: ScriptedModel

    def agent_file(self, task: str, name: str) -> Path:
        return self.run_dir / "trials" / self.records[task].trial_key / "logs" / "agent" / name


def _dataset(root: Path, image: str) -> Path:
    for name, script in TASKS.items():
        task = root / name
        for part in ("environment", "tests", "solution"):
            (task / part).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text(
            textwrap.dedent("""\
            version = "1.0"
            [environment]
            userland = "host"
            cpus = 1
            memory_mb = 256
            storage_mb = 128
            [agent]
            timeout_sec = 120
            [verifier]
            timeout_sec = 30
            """)
        )
        (task / "instruction.md").write_text(script)
        (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho 42 > /app/answer.txt\n")
        (task / "tests" / "test.sh").write_text(
            '#!/bin/bash\nif test "$(cat /app/answer.txt 2>/dev/null)" = 42; then echo 1 > '
            "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        )
    return root


@pytest.fixture(scope="module", params=BACKENDS)
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyRun]:
    kind = request.param
    require(missing_sandbox_prerequisites(), "a process sandbox")
    if kind in ENGINES:
        require(_engine_problems(kind), f"the {kind} engine")
        from levelfield.sandbox import oci

        oci.build_offline_bases(base_url=ENGINES[kind], log=lambda line: None)
    root = tmp_path_factory.mktemp(f"proxy-{kind}")
    dataset = _dataset(root / "dataset", "python:3.13-slim-bookworm")
    saved = {name: os.environ.get(name) for name in ("DOCKER_HOST", KEY_ENV)}
    os.environ[KEY_ENV] = PLANTED_KEY
    if kind in ENGINES:
        os.environ["DOCKER_HOST"] = ENGINES[kind]
    model = ScriptedModel.for_dataset(dataset, require_key=PLANTED_KEY)
    server = serve(model)
    try:
        with witness_upstream(server.port) as (upstream, witness):
            options = AgentOptions(
                command='python3 "$LEVELFIELD_INSTRUCTION_FILE"',
                name="hostile-proxy",
                api_key_env=KEY_ENV,
                base_url=upstream,
                budget=ModelBudget(max_tokens=CEILING),
            )
            config = RunConfig(
                dataset=dataset,
                out=root / "run",
                agents=["command"],
                policies=["uncapped"],
                backend="process" if kind == "process" else "oci",
                concurrency=3,
                index_probe_every_s=0,
                agent_options=options,
            )
            run(config)
        with reading(root / "run") as store:
            records = {r.task: r for r in store.records()}
        yield ProxyRun(kind, root / "run", records, witness, model)
    finally:
        server.stop()
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def test_every_attack_is_refused_and_recorded_and_nothing_else_reaches_the_upstream(
    proxied: ProxyRun,
) -> None:
    record = proxied.records["attacks"]
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED), record
    attempts = json.loads(proxied.agent_file("attacks", "proxy-attacks.json").read_text())
    assert {a["provider"] for a in attempts} == {"anthropic", "openai", "gemini"}
    controls = [a for a in attempts if a["control"]]
    for attempt in attempts:
        if attempt["control"]:
            assert attempt["statuses"][:1] == [200], (attempt, proxied.witness.errors)
        else:
            assert not any(200 <= s < 300 for s in attempt["statuses"]), attempt
    refused = [c for c in record.api_calls if c.outcome == "refused"]
    attacks = len(attempts) - len(controls)
    assert refusals(refused, "refused") == attacks + 2 * 3
    assert all(c.method is not None and c.status in (400, 403, 405, 414) for c in refused)
    tagged = [s for s in proxied.witness.seen if _proxy_attacks.CONTROL_HEADER.lower() in s.headers]
    assert len(tagged) == len(controls)  # of the attacks, the carried calls alone arrived
    for seen in proxied.witness.seen:  # every trial's: model calls only, each with the key
        assert seen.method == "POST" and seen.target.endswith(("/chat/completions", "/messages",
            ":generateContent")), seen.target  # fmt: skip
        assert seen.credential() == PLANTED_KEY
    notes = " | ".join(record.evidence.notes)
    assert "the model proxy refused" in notes and "never relayed" in notes, notes


def test_an_agent_calling_past_its_token_ceiling_is_budget_exhausted(proxied: ProxyRun) -> None:
    record = proxied.records["spend"]
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.BUDGET_EXHAUSTED), (
        record.reason,
        record.evidence.notes,
    )
    assert record.budget == ModelBudget(max_tokens=CEILING)
    # recorded in the order the calls ended: a relayed call is written down after its answer
    # reached the agent, which may already have been refused its next one
    calls = sorted(record.api_calls, key=lambda c: c.started_at)
    answered = [c for c in calls if c.outcome == "ok"]
    each = [(c.tokens_in or 0) + (c.tokens_out or 0) for c in answered]
    assert sum(each) >= CEILING > sum(each) - each[-1]  # the last call answered crossed it
    assert calls[-1].outcome == "budget_exhausted" and calls[-1].status == 429
    assert [c.outcome for c in calls] == ["ok"] * len(answered) + ["budget_exhausted"] * (
        40 - len(answered)
    )
    statuses = json.loads(proxied.agent_file("spend", "spend.json").read_text())
    assert statuses == [200] * len(answered) + [429] * (40 - len(answered))
    assert sum("Count the words" in json.dumps(b) for _, b in proxied.model.requests) == len(
        answered
    )  # the refused calls never left the proxy
    notes = " | ".join(record.evidence.notes)
    assert "the model budget stopped the agent" in notes and f"{CEILING:,} tokens" in notes, notes


def test_an_honest_agent_under_the_ceiling_passes(proxied: ProxyRun) -> None:
    record = proxied.records["honest"]
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), (
        record.reason,
        record.evidence.notes,
    )
    assert record.api_calls and all(c.outcome == "ok" for c in record.api_calls)
    assert 0 < (record.tokens_in or 0) + (record.tokens_out or 0) < CEILING


def test_nothing_written_holds_the_key(proxied: ProxyRun) -> None:
    for path in proxied.run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path
    print(f"\n{proxied.backend}: " + ", ".join(
        f"{task} {r.outcome}/{r.reason}" for task, r in sorted(proxied.records.items())
    ))  # fmt: skip
