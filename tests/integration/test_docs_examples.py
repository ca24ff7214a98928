"""The guide's shell examples that need no network run as written: every fenced block after a
`<!-- docs-example: offline -->` line in `docs/`, in a fresh directory beside the checkout's
`examples/` and `tests/data/`, with `levelfield` on PATH. A block that fails is a page that lies."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- docs-example: offline -->"
BLOCK = re.compile(re.escape(MARKER) + r"\s*```(?:bash|sh)\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for n, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            found.append((f"{page.relative_to(ROOT / 'docs')}#{n}", match.group(1)))
    return found


def test_the_guide_marks_examples_to_run() -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text()
    assert text.count(MARKER) == len(BLOCK.findall(text)) >= 1  # every marker has its block


@pytest.mark.sandbox
@pytest.mark.parametrize(("where", "script"), examples(), ids=[w for w, _ in examples()])
def test_a_guide_example_runs_as_written(where: str, script: str, tmp_path: Path) -> None:
    for shared in ("examples", "tests"):
        (tmp_path / shared).symlink_to(ROOT / shared)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{where}:\n{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
