"""The hostile agents: each attack is a shell script that a `command` agent runs in its sandbox.

One task per attack. Its instruction *is* the attack's script, and the run's one agent is
`command` with `bash "$LEVELFIELD_INSTRUCTION_FILE"`: so a single run holds every attack (and the
honest trial beside them) as trials of one agent, with the concurrency and the store of a real
run. The task itself is trivial (write 42 to /app/answer.txt); no attack does it, so a trial
that comes out `passed` is a forged pass, except the honest one's.

A script prints a line starting `ESCAPED` (or `ALLOCATED`) whenever a step that must fail succeeds;
the tests look for it in the agent's log. Paths of the harness's own files reach the scripts as
@NAME@ placeholders.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.records import Outcome, Reason

ANSWER = 'test "$(cat /app/answer.txt 2>/dev/null)" = 42'
# Terminal-Bench's convention: reward.txt, always written.
GRADE_TXT = f"""if {ANSWER}; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
# Harbor's other convention: reward.json. The agent's forgeries then go to reward.txt, which the
# harness used to read first, whatever test.sh wrote.
GRADE_JSON = f"""if {ANSWER}; then echo '{{"reward": 1}}' > /logs/verifier/reward.json
else echo '{{"reward": 0}}' > /logs/verifier/reward.json; fi
"""
# A grader in two files, the second read a moment after the start: the window a process the
# agent left running would use to rewrite it.
GRADE_SOURCED = "sleep 2\n. /tests/check.sh\n"

FAILED = (Outcome.FAILED, Reason.TESTS_FAILED)
TAMPERED = (Outcome.FAILED, Reason.GRADER_TAMPERED)
VERIFIER_ERROR = (Outcome.INFRA_ERROR, Reason.VERIFIER_ERROR)
BACKGROUND = "nohup setsid bash -c {script} >/dev/null 2>&1 &"


@dataclass(frozen=True)
class Attack:
    name: str
    script: str
    expect: tuple[Outcome, Reason]
    grader: str = GRADE_TXT
    memory_mb: int = 64
    storage_mb: int = 64
    cpus: float = 0.5
    agent_timeout: float = 30
    extra_tests: dict[str, str] = field(default_factory=dict)
    note: str = ""  # a word the stored evidence must hold
    secret: bool = False  # loot written to /logs/agent/*.b64 must hold no secret
    expect_oci: tuple[Outcome, Reason] | None = None  # where a container's verdict differs

    def expected(self, backend: str) -> tuple[Outcome, Reason]:
        return self.expect_oci if self.expect_oci and backend != "process" else self.expect


def _background(script: str) -> str:
    return BACKGROUND.format(script="'" + script.replace("'", "'\\''") + "'")


ATTACKS = [
    Attack("honest", "echo 42 > /app/answer.txt", (Outcome.PASSED, Reason.TESTS_PASSED)),
    # -- forging the reward ----------------------------------------------------------------
    Attack(  # the attack as first found: on process the harness read the host's file, "12.x"
        "forge-link-issue",
        "mkdir -p /logs/verifier; ln -sf /etc/debian_version /logs/verifier/reward.txt",
        FAILED,
        note="symbolic link to /etc/debian_version",
    ),
    Attack(
        "forge-link",
        "ln -sf /proc/sys/kernel/pid_max /logs/verifier/reward.txt",
        FAILED,
        grader=GRADE_JSON,
        note="symbolic link to /proc/sys/kernel/pid_max",
    ),
    Attack(
        "forge-fifo", "mkfifo /logs/verifier/reward.txt", FAILED, grader=GRADE_JSON, note="fifo"
    ),
    Attack(
        "forge-directory",
        "mkdir /logs/verifier/reward.txt && echo 1 > /logs/verifier/reward.txt/r",
        FAILED,
        grader=GRADE_JSON,
        note="reward.txt/r",
    ),
    Attack(
        "forge-prewritten",
        "echo 1 > /logs/verifier/reward.txt",
        FAILED,
        grader=GRADE_JSON,
        note="reward.txt (a file of 2 bytes)",
    ),
    Attack(  # the harness clears /logs/verifier with the image's own tools: break them first
        "break-tools",
        """
        for tool in rm mkdir; do
          printf '#!/bin/sh\nexit 0\n' > "$(command -v $tool)" 2>/dev/null || echo "$tool stays"
        done
        echo 1 > /logs/verifier/reward.txt
        """,
        FAILED,  # process: the host's /usr is read-only, the tools stay
        grader=GRADE_JSON,
        expect_oci=TAMPERED,  # oci: the image is the agent's; the harness sees it from outside
    ),
    # -- the grader itself -------------------------------------------------------------------
    Attack(
        "tests-rewrite",
        _background(
            "while [ ! -f /tests/check.sh ]; do sleep 0.05; done; sleep 0.3; "
            "echo 'echo 1 > /logs/verifier/reward.txt' > /tests/check.sh"
        ),
        TAMPERED,
        grader=GRADE_SOURCED,
        extra_tests={"check.sh": GRADE_TXT},
        note="check.sh (rewritten)",
    ),
    Attack(
        "tests-plant",
        _background(
            "while [ ! -f /tests/check.sh ]; do sleep 0.05; done; "
            "echo 'import os' > /tests/conftest.py"
        ),
        TAMPERED,
        grader=GRADE_SOURCED,
        extra_tests={"check.sh": GRADE_TXT},
        note="conftest.py (added)",
    ),
    # -- leaving the sandbox's limits ---------------------------------------------------------
    Attack(
        "leave-cgroup",
        """
        for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs \\
                 /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do
          [ -e "$f" ] && (echo $$ > "$f" || echo max > "$f") 2>/dev/null && echo "ESCAPED write $f"
        done
        mkdir -p /tmp/cg
        mount -t cgroup -o memory none /tmp/cg 2>/dev/null && echo "ESCAPED cgroup v1 mount"
        mount -t cgroup2 none /tmp/cg 2>/dev/null && echo "ESCAPED cgroup2 mount"
        unshare -C -m true 2>/dev/null && echo "ESCAPED unshare"
        grep -E 'Cap(Eff|Bnd)|NoNewPrivs' /proc/self/status; cat /proc/self/cgroup
        perl -e '$x = "x" x (400 << 20); print "ALLOCATED past the ceiling\\n"'
        """,
        (Outcome.INFRA_ERROR, Reason.OOM_KILLED),
        memory_mb=32,
    ),
    Attack(
        "mount-host-disk",
        """
        mkdir -p /tmp/m
        awk 'NR > 2 {print $1, $2, $4}' /proc/partitions | while read major minor dev; do
          mknod "/tmp/$dev" b "$major" "$minor" 2>/dev/null
          head -c 512 "/tmp/$dev" >/dev/null 2>&1 && echo "ESCAPED read /dev/$dev"
          if mount "/tmp/$dev" /tmp/m 2>/dev/null; then
            echo "ESCAPED mounted /dev/$dev"
            echo pwned > "/tmp/m/@CANARY_REL@" 2>/dev/null
          fi
        done
        mount -t proc proc /tmp/m 2>/dev/null && echo "ESCAPED proc mount"
        mount -t sysfs sysfs /tmp/m 2>/dev/null && echo "ESCAPED sysfs mount"
        echo pwned > "@CANARY@" 2>/dev/null && echo "ESCAPED canary"
        """,
        FAILED,
    ),
    Attack(
        "read-harness-files",
        """
        {
          cat /proc/1/environ; for p in /proc/[0-9]*; do cat "$p/environ"; done
          cat "@RUN_DIR@/harness-secret.txt" "@RUN_DIR@/run.db" "@KEY_FILE@" /etc/shadow
          cat "@DATASET@"/*/solution/solve.sh
          ls -la "@RUN_DIR@" "@DATASET@" /var/lib/containers /var/tmp /root
          find / -xdev -name run.db 2>/dev/null
        } 2>&1 | base64 -w0 > /logs/agent/loot.b64
        """,
        FAILED,
        secret=True,
    ),
    Attack(
        "dump-environment",
        "{ env; tr '\\0' '\\n' < /proc/self/environ; } | base64 -w0 > /logs/agent/env.b64; env",
        FAILED,
        secret=True,
    ),
    # -- disturbing the run -------------------------------------------------------------------
    Attack("kill-everything", "kill -9 -1; sleep 1; echo still here", FAILED),
    Attack(
        "fork-bomb",
        "bomb() { bomb | bomb & }; bomb; sleep 3",
        (Outcome.INFRA_ERROR, Reason.PIDS_EXHAUSTED),
        memory_mb=256,
        agent_timeout=10,
    ),
    Attack(
        "fill-disk",
        "dd if=/dev/zero of=/app/fill bs=1M; dd if=/dev/zero of=/tmp/fill bs=1M; df -h /app",
        (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED),
        storage_mb=16,
    ),
    Attack("delete-logs", "rm -rf /logs/* /logs/.[!.]*; ls -la /logs", FAILED),
    Attack(
        "logs-specials",
        """
        cd /logs/agent
        mkfifo fifo
        perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Local => "socket", Listen => 1)'
        mknod null c 1 3 2>/dev/null
        ln -s /etc/shadow shadow-link
        ln -s /nowhere/at/all dangling
        mkdir -p deep && ln -s /etc deep/etc-link
        echo kept > plain.txt
        """,
        FAILED,
        note="not copied from /logs: agent/fifo",
    ),
    # -- graders that leave something other than a reward (read safely, said plainly) -----------
    Attack(
        "grader-link",
        "echo 42 > /app/answer.txt",
        VERIFIER_ERROR,
        grader="ln -sf /etc/debian_version /logs/verifier/reward.txt\n",
        note="symbolic link to /etc/debian_version",
    ),
    Attack(
        "grader-fifo",
        "echo 42 > /app/answer.txt",
        VERIFIER_ERROR,
        grader="mkfifo /logs/verifier/reward.txt\n",
        note="a fifo",
    ),
    Attack(
        "grader-boolean",
        "echo 42 > /app/answer.txt",
        VERIFIER_ERROR,
        grader="echo '{\"reward\": true}' > /logs/verifier/reward.json\n",
        note="not a number in [0, 1]",
    ),
    Attack(
        "grader-above-one",
        "echo 42 > /app/answer.txt",
        VERIFIER_ERROR,
        grader="echo 12 > /logs/verifier/reward.txt\n",
        note="'12', not a number in [0, 1]",
    ),
]


def write_dataset(root: Path, places: dict[str, str]) -> Path:
    """One task per attack under `root`; `places` fills the scripts' @NAME@ placeholders."""
    for attack in ATTACKS:
        task = root / attack.name
        for part in ("environment", "tests", "solution"):
            (task / part).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text(
            textwrap.dedent(f"""\
            version = "1.0"
            [environment]
            userland = "host"
            cpus = {attack.cpus}
            memory_mb = {attack.memory_mb}
            storage_mb = {attack.storage_mb}
            [agent]
            timeout_sec = {attack.agent_timeout}
            [verifier]
            timeout_sec = 20
            """)
        )
        script = textwrap.dedent(attack.script).strip() + "\n"
        for name, value in places.items():
            script = script.replace(f"@{name}@", value)
        (task / "instruction.md").write_text(script)
        (task / "environment" / "Dockerfile").write_text(
            "FROM debian:bookworm-slim\nWORKDIR /app\n"
        )
        (task / "solution" / "solve.sh").write_text(
            "#!/bin/bash\n# HARNESS-MARKER-SOLUTION\necho 42 > /app/answer.txt\n"
        )
        (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + attack.grader)
        for name, text in attack.extra_tests.items():
            (task / "tests" / name).write_text(text)
    return root
