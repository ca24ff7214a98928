"""What a test report says: how many tests ran and how many failed, read from the formats test.sh
asks pytest for (CTRF's JSON, JUnit's XML, pytest-json-report's JSON).

The code under test runs inside the grader with the grader's rights, so a reward file alone can
be the agent's: a program the tests call can write `1` and end the grader, a module they import
can end pytest with status 0 before it writes its report. A report the tests' runner writes at
the session's end is the second witness a pass needs (`_grading.unbacked`). A shape none of these
readers knows backs nothing: a pass stands on what it says, not on a file merely being there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from xml.etree import ElementTree


@dataclass(frozen=True, slots=True)
class Tally:
    """Tests the report says ran (None where it does not count them) and those that failed or
    errored."""

    tests: int | None
    failed: int


def read_tally(data: bytes) -> Tally | str:
    """The report's tally, or why there is none (the words for the evidence)."""
    text = data.decode(errors="replace").strip()
    if text.startswith("<"):
        return _junit(text)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return "neither JSON nor XML"
    if not isinstance(parsed, dict):
        return "not a report object"
    if isinstance(parsed.get("results"), dict):
        return _ctrf(parsed["results"])
    if isinstance(parsed.get("summary"), dict):
        return _json_report(parsed["summary"])
    return "no CTRF `results` or pytest-json-report `summary` in it"


def _ctrf(results: dict[str, object]) -> Tally | str:
    summary = results.get("summary")
    if not isinstance(summary, dict):
        return "a CTRF report without its summary"
    counts = {key: summary.get(key, 0) for key in ("tests", "failed")}
    if not all(_count(value) for value in counts.values()):
        return f"a CTRF summary whose counts are not counts: {counts}"
    tests = summary.get("tests")
    return Tally(tests if isinstance(tests, int) else None, int(counts["failed"]))  # type: ignore[call-overload]


def _json_report(summary: dict[str, object]) -> Tally | str:
    counts = {key: summary.get(key, 0) for key in ("total", "failed", "error")}
    if not all(_count(value) for value in counts.values()):
        return f"a pytest-json-report summary whose counts are not counts: {counts}"
    total = summary.get("total")
    failed = int(counts["failed"]) + int(counts["error"])  # type: ignore[call-overload]
    return Tally(total if isinstance(total, int) else None, failed)


def _junit(text: str) -> Tally | str:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        return f"XML that does not parse ({exc})"
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites") or not suites:
        return f"XML whose root is <{root.tag}>, not a JUnit test suite"
    tests = failed = 0
    for suite in suites:
        numbers = [suite.get(key, "0") for key in ("tests", "failures", "errors")]
        if not all(number.isdigit() for number in numbers):
            return f"a JUnit suite whose counts are not counts: {numbers}"
        tests += int(numbers[0])
        failed += int(numbers[1]) + int(numbers[2])
    return Tally(tests, failed)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
