"""Inspect tasks for tests/integration/test_inspect.py, run by the real `inspect eval` CLI: Harbor
tasks through inspect-harbor (its samples and its scorer), solved by Inspect's scripted model
(`mockllm/model`), whose first turn calls the bash tool with the task's own solution/solve.sh and
whose second submits. The agent is inspect-harbor's react loop without its context compaction,
which counts tokens with tiktoken's encoding, fetched from the internet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.tool import bash
from inspect_harbor import harbor

# set, so that Inspect counts no tokens (it would fetch tiktoken's encoding from the internet)
USAGE = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)


@task
def harbor_scripted(path: str) -> Task:
    """Every Harbor task under `path`, as inspect-harbor loads them, with a scripted agent."""
    loaded = harbor(path=path)
    solutions = _solutions(Path(path))
    return Task(
        dataset=loaded.dataset,
        solver=react(tools=[bash(timeout=300)]),
        scorer=loaded.scorer,
        model=get_model("mockllm/model", custom_outputs=_scripted(solutions)),
    )


def _solutions(root: Path) -> dict[str, str]:
    """instruction → its task's solve.sh, for each task under `root` (or `root` itself)."""
    dirs = [root] if (root / "task.toml").is_file() else sorted(p for p in root.iterdir())
    return {
        (d / "instruction.md").read_text().strip(): (d / "solution" / "solve.sh").read_text()
        for d in dirs
        if (d / "task.toml").is_file()
    }


def _scripted(solutions: dict[str, str]) -> Any:
    def output(messages: list[Any], tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
        if any(m.role == "tool" for m in messages):
            said = ModelOutput.for_tool_call("mockllm/model", "submit", {"answer": "done"})
        else:
            asked = next(m.text for m in messages if m.role == "user").strip()
            script = next(s for i, s in solutions.items() if i in asked)
            said = ModelOutput.for_tool_call("mockllm/model", "bash", {"command": script})
        said.usage = USAGE
        return said

    return output
