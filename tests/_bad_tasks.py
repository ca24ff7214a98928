"""Task directories, good and bad in one way each, written for the bad-input tests."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

GOOD_TOML = textwrap.dedent("""\
    version = "1.0"
    [environment]
    cpus = 0.5
    memory_mb = 64
    storage_mb = 16
    [agent]
    timeout_sec = 30
    [verifier]
    timeout_sec = 30
    """)
TEST_SH = (
    "#!/bin/bash\nif test -e /app/done; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)
# What `tasks check` must say about each kind of bad task (a substring of its one problem).
EXPECTED = {
    "wrong_type": "task.toml: ",
    "bad_toml": "not valid TOML",
    "missing_file": "missing (",
    "no_from": "no FROM instruction",
    "binary_instruction": "instruction.md: ",  # then "not UTF-8 text" or "binary, not text"
    "symlink_out": "outside the task",
}
KINDS = ("good", *EXPECTED)
# Known task.toml fields and the TOML text of a value of the wrong type (or range) for each.
FIELDS = {
    ("environment", "cpus"): ['"lots"', "true", "[1, 2]", "-1", "{ n = 1 }"],
    ("environment", "memory_mb"): ['"64"', "64.5", "false", "0", "[64]"],
    ("environment", "storage_mb"): ['"16g"', "1.5", "true", "-16"],
    ("agent", "timeout_sec"): ['"soon"', "true", "[30]", "0"],
    ("verifier", "timeout_sec"): ['"30"', "false", "-1"],
    ("environment", "allow_internet"): ['"yes"', "1", "[true]"],
}
MISSING = ("task.toml", "instruction.md", "tests/test.sh")
LINKS = (
    ("tests/test.sh", "/etc/hostname"),
    ("environment/data", "../../.."),
    ("solution/helper.sh", "/usr/bin/env"),
)


def write_task(root: Path, kind: str, variant: int = 0, junk: bytes = b"\xff") -> Path:
    """A task that is good, or bad in exactly the way `kind` names; `variant` picks which field,
    file or link; `junk` is the instruction of a binary_instruction task (not UTF-8, or NUL)."""
    for part in ("environment", "tests", "solution"):
        (root / part).mkdir(parents=True, exist_ok=True)
    toml = GOOD_TOML
    if kind == "wrong_type":
        (section, key), values = list(FIELDS.items())[variant % len(FIELDS)]
        wrong = f"{key} = {values[variant % len(values)]}"
        toml = toml.replace(f"[{section}]\n", f"[{section}]\n{wrong}\n", 1)
        toml = _drop_duplicate(toml, section, key)
    elif kind == "bad_toml":
        toml = toml.replace("cpus = 0.5", "cpus = = 0.5")
    (root / "task.toml").write_text(toml)
    if kind == "binary_instruction":
        (root / "instruction.md").write_bytes(junk)
    else:
        (root / "instruction.md").write_text(f"Task {root.name}: create /app/done.\n")
    base = "" if kind == "no_from" else "FROM debian:bookworm-slim\n"
    (root / "environment" / "Dockerfile").write_text(base + "WORKDIR /app\nRUN true\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    (root / "tests" / "test.sh").write_text(TEST_SH)
    if kind == "missing_file":
        (root / MISSING[variant % len(MISSING)]).unlink()
    elif kind == "symlink_out":
        where, target = LINKS[variant % len(LINKS)]
        (root / where).unlink(missing_ok=True)
        os.symlink(target, root / where)
    return root


def _drop_duplicate(toml: str, section: str, key: str) -> str:
    """The good value of `key` goes, so the wrong one is the only one (TOML refuses two)."""
    lines, seen, in_section = [], False, False
    for line in toml.splitlines():
        if line.startswith("["):
            in_section = line == f"[{section}]"
        if in_section and line.startswith(f"{key} = "):
            if seen:
                continue
            seen = True
        lines.append(line)
    return "\n".join(lines) + "\n"
