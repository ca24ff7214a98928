"""Bad input, generated: every task directory that is wrong in one way (a wrong type in
task.toml, a missing file, a Dockerfile without FROM, binary garbage as instruction.md, a symlink
out of the task) gets exactly one problem that says what is wrong, and the good ones load."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from levelfield.checks import check_dataset
from levelfield.tasks import load_dataset

from .._bad_tasks import EXPECTED, FIELDS, KINDS, write_task

# Bytes that are not UTF-8 text: an invalid byte somewhere, or a NUL.
JUNK = st.one_of(
    st.tuples(st.binary(max_size=64), st.sampled_from([b"\xff", b"\xc3(", b"\x80", b"\0"]),
              st.binary(max_size=64)).map(b"".join),
    st.binary(min_size=1, max_size=256).filter(lambda b: _is_not_text(b)),
)  # fmt: skip
TASKS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 20), JUNK), min_size=1, max_size=8
)


def _is_not_text(raw: bytes) -> bool:
    try:
        return "\0" in raw.decode("utf-8")
    except UnicodeDecodeError:
        return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TASKS)
def test_each_bad_task_gets_its_own_clear_problem_and_good_ones_load(
    tasks: list[tuple[str, int, bytes]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "dataset"
        kinds = {}
        for i, (kind, variant, junk) in enumerate(tasks):
            name = f"t{i:02d}-{kind}"
            write_task(dataset / name, kind, variant, junk)
            kinds[name] = (kind, variant)

        loaded = load_dataset(dataset)  # never raises for a bad task
        report = check_dataset(dataset)

        assert {t.name for t in loaded.tasks} == {n for n, (k, _) in kinds.items() if k == "good"}
        assert sorted(c.name for c in report.tasks) == sorted(kinds)  # every task, once
        for check in report.tasks:
            kind, variant = kinds[check.name]
            if kind == "good":
                assert check.problems == [], check.problems
                continue
            (problem,) = check.problems
            assert EXPECTED[kind] in problem, (kind, problem)
            assert check.name in problem  # names the task's own file
            if kind == "wrong_type":
                section, key = list(FIELDS)[variant % len(FIELDS)]
                assert f"{section}.{key}" in problem, problem
            if kind == "binary_instruction":
                assert "not UTF-8 text" in problem or "binary, not text" in problem
