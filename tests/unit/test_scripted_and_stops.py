"""The pure parts around the proxy: how a solution is cut into tool calls, the failure plan of the
scripted model, and which last API call means the API stopped the agent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from levelfield.model_api.scripted_model import Failure, solution_commands
from levelfield.outcome import PhaseLog, classify, stopping_call
from levelfield.records import ApiCall, Reason

SCRIPT = """#!/bin/bash
# a comment
set -euo pipefail
cd "$WORK"
NAME=report
greet() {
    echo "hello $1"
}
cat > notes.txt <<'EOF'
line one
EOF
if [ -f notes.txt ]; then
    greet world > "$NAME.txt"
fi
echo a \\
  b >> "$NAME.txt"
"""


def test_solution_commands_keep_heredocs_and_blocks_whole_and_carry_shell_state() -> None:
    commands = solution_commands(SCRIPT)
    assert len(commands) == 3
    heredoc, block, continued = commands
    assert heredoc.endswith("cat > notes.txt <<'EOF'\nline one\nEOF")
    assert block.endswith('    greet world > "$NAME.txt"\nfi')
    assert continued.endswith('echo a \\\n  b >> "$NAME.txt"')
    for command in commands:  # each runs in a fresh shell: the state leads every one
        assert command.startswith('set -euo pipefail\ncd "$WORK"\nNAME=report\ngreet() {')
    assert not any("# a comment" in c for c in commands)


def test_running_the_commands_one_by_one_in_fresh_shells_does_what_the_script_does(
    tmp_path: Path,
) -> None:
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir(), split.mkdir()
    subprocess.run(
        ["bash", "-c", SCRIPT], env={"WORK": str(whole), "PATH": "/usr/bin:/bin"}, check=True
    )
    for command in solution_commands(SCRIPT):
        subprocess.run(
            ["bash", "-c", command], env={"WORK": str(split), "PATH": "/usr/bin:/bin"}, check=True
        )
    files = sorted(p.name for p in whole.iterdir())
    assert files == sorted(p.name for p in split.iterdir()) == ["notes.txt", "report.txt"]
    for name in files:
        assert (whole / name).read_text() == (split / name).read_text()


def test_an_unterminated_heredoc_is_not_a_complete_command() -> None:
    assert solution_commands("cat <<EOF > f\nx\n") == ["cat <<EOF > f\nx"]


def test_failure_plan_parses_one_call_or_every_call_from_n() -> None:
    once, onward = Failure.parse("429@3"), Failure.parse("500@2+")
    assert [once.applies(n) for n in (2, 3, 4)] == [False, True, False]
    assert [onward.applies(n) for n in (1, 2, 9)] == [False, True, True]
    with pytest.raises(ValueError, match="STATUS@CALL"):
        Failure.parse("429 on 3")


def _call(status: int | None, outcome: str) -> ApiCall:
    return ApiCall(
        started_at="2026-01-01T00:00:00.000+00:00",
        latency_s=0.1,
        attempt=1,
        status=status,
        outcome=outcome,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("last", "stopped"),
    [
        ((200, "ok"), False),
        ((401, "client_error"), True),
        ((403, "client_error"), True),
        ((400, "client_error"), False),  # a malformed request is the agent's own
        ((429, "rate_limited"), True),
        ((529, "overloaded"), True),
        ((500, "server_error"), True),
        ((None, "connection_error"), True),
    ],
)
def test_the_last_call_decides_whether_the_api_stopped_the_agent(
    last: tuple[int | None, str], stopped: bool
) -> None:
    calls = (_call(429, "rate_limited"), _call(*last))
    assert (stopping_call(calls) is not None) is stopped


def test_a_failure_followed_by_a_success_did_not_stop_the_agent() -> None:
    assert stopping_call((_call(429, "rate_limited"), _call(200, "ok"))) is None
    assert stopping_call(()) is None


def test_an_api_stop_is_an_api_error_unless_the_tests_passed() -> None:
    calls = (_call(200, "ok"), _call(429, "rate_limited"))
    assert classify(PhaseLog(reward=0.0, api_calls=calls)) is Reason.API_ERROR
    assert classify(PhaseLog(reward=1.0, api_calls=calls)) is Reason.TESTS_PASSED
    assert classify(PhaseLog(reward=0.0, api_calls=calls[:1])) is Reason.TESTS_FAILED


def test_failure_plan_names_hangs_resets_and_stream_errors() -> None:
    assert Failure.parse("hang@2") == Failure(None, 2, False, "hang")
    assert Failure.parse("reset@1+") == Failure(None, 1, True, "reset")
    assert Failure.parse("stream-error@3+").kind == "stream-error"
    with pytest.raises(ValueError, match="hang, reset, stream-error"):
        Failure.parse("drop@1")


@pytest.mark.parametrize(
    ("status", "outcome", "apis"),
    [
        (401, "client_error", True),
        (403, "client_error", True),
        (429, "rate_limited", True),
        (500, "server_error", True),
        (None, "connection_error", True),
        (400, "client_error", False),  # a context too long: the agent's request
        (413, "client_error", False),
        (None, "cut_short", False),  # the agent's own deadline or exit ended it
        (200, "cut_short", False),
        (200, "ok", False),
    ],
)
def test_one_rule_says_whose_failure_a_call_was(
    status: int | None, outcome: str, apis: bool
) -> None:
    from levelfield.outcome import is_api_failure

    assert is_api_failure(status, outcome) is apis
    assert (stopping_call((_call(status, outcome),)) is not None) is apis


def test_statuses_get_the_same_words_on_every_path() -> None:
    from levelfield.outcome import outcome_for_status

    words = {s: outcome_for_status(s) for s in (None, 200, 400, 401, 429, 500, 503, 529)}
    assert words == {
        None: "connection_error",
        200: "ok",
        400: "client_error",
        401: "client_error",
        429: "rate_limited",
        500: "server_error",
        503: "server_error",
        529: "overloaded",
    }
    assert outcome_for_status(503, '{"error": "Overloaded"}') == "overloaded"
    assert outcome_for_status(400, "overloaded with tokens") == "client_error"
