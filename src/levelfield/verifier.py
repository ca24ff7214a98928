"""tests/test.sh → reward, by Harbor's conventions.

The tests enter the sandbox only now, after the agent phase, so the agent never saw them. The
reward is /logs/verifier/reward.txt (a number) or reward.json ({"reward": x}, or else the mean of
its numeric values); neither file means the verifier failed, which is not the agent's failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

REWARD_TXT = PurePosixPath("/logs/verifier/reward.txt")
REWARD_JSON = PurePosixPath("/logs/verifier/reward.json")
TEST = "bash /tests/test.sh"


@dataclass(frozen=True, slots=True)
class Verdict:
    phase: PhaseResult
    reward: float | None


def run_verifier(task: Task, box: Sandbox, *, trial_dir: Path) -> Verdict:
    box.copy_in(task.tests_dir, PurePosixPath("/tests"))
    phase = box.exec(TEST, timeout_s=task.verifier_timeout_s, log_path=trial_dir / "verifier.log")
    return Verdict(phase, read_reward(box))


def read_reward(box: Sandbox) -> float | None:
    text = box.read_file(REWARD_TXT)
    if text is not None:
        return parse_reward_txt(text.decode(errors="replace"))
    raw = box.read_file(REWARD_JSON)
    return parse_reward_json(raw.decode(errors="replace")) if raw is not None else None


def parse_reward_txt(text: str) -> float | None:
    try:
        return float(text.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


def parse_reward_json(text: str) -> float | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("reward"), int | float):
        return float(data["reward"])
    values = [
        float(v) for v in data.values() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return sum(values) / len(values) if values else None
