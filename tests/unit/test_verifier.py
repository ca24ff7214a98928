import pytest

from levelfield.verifier import parse_reward_json, parse_reward_txt


@pytest.mark.parametrize(
    ("text", "reward"), [("1\n", 1.0), ("0", 0.0), ("0.5\nextra", 0.5), ("", None), ("yes", None)]
)
def test_reward_txt(text: str, reward: float | None) -> None:
    assert parse_reward_txt(text) == reward


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ('{"reward": 1}', 1.0),
        ("0.25", 0.25),
        ('{"a": 1, "b": 0}', 0.5),
        ('{"ok": true}', None),
        ("[1]", None),
        ("{", None),
    ],
)
def test_reward_json(text: str, reward: float | None) -> None:
    assert parse_reward_json(text) == reward


def test_report_files_named_by_test_sh() -> None:
    from pathlib import PurePosixPath

    from levelfield.outcome import named_reports

    test_sh = """# pytest --junitxml /not/this.xml
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
python -m pytest --junitxml=report.xml --ctrf "$OUT/x.json" /tests
"""
    assert named_reports(test_sh, PurePosixPath("/app")) == [
        PurePosixPath("/logs/verifier/ctrf.json"),
        PurePosixPath("/app/report.xml"),
    ]


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("1\n", 1.0),
        ("0", 0.0),
        (" 0.25 \n", 0.25),
        ("1e0", 1.0),
        ("12.11", None),  # /etc/debian_version, read through a link
        ("1.0000001", None),
        ("-0.5", None),
        ("nan", None),
        ("inf", None),
        ("true", None),
        ("0.5\nextra", None),  # one number and nothing else
        ("", None),
    ],
)
def test_strict_reward_txt(text: str, reward: float | None) -> None:
    from levelfield.verifier import strict_reward_txt

    assert strict_reward_txt(text) == reward


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ('{"reward": 1}', 1.0),
        ("0.25", 0.25),
        ('{"a": 1, "b": 0}', 0.5),
        ('{"reward": true}', None),
        ("true", None),
        ('{"reward": 2}', None),
        ('{"reward": NaN}', None),
        ('{"reward": Infinity}', None),
        ('{"reward": "1"}', None),
        ('{"a": 1, "b": 7}', None),
        ("{}", None),
        ("[1]", None),
    ],
)
def test_strict_reward_json(text: str, reward: float | None) -> None:
    from levelfield.verifier import strict_reward_json

    assert strict_reward_json(text) == reward


def test_tests_changes_tell_the_agents_from_the_runners() -> None:
    from levelfield.verifier import tests_changes

    shipped = {".": "directory", "test.sh": "file:a", "check.sh": "file:b", "data": "directory"}
    found = {
        ".": "directory",
        "test.sh": "file:a",
        "check.sh": "file:c",
        "__pycache__": "directory",
        "__pycache__/t.cpython-313.pyc": "file:d",
        ".pytest_cache/v/cache/lastfailed": "file:e",
        "conftest.py": "file:f",
        "notes.txt": "file:g",
    }
    changed, added = tests_changes(shipped, found)
    assert changed == ["check.sh (rewritten)", "data (removed)", "conftest.py (added)"]
    assert added == ["notes.txt"]  # pytest's own caches are not listed
    assert tests_changes(shipped, {}) == ([], [])  # the sandbox is gone: nothing to say


# Lines as apt, bash, pip, uv and curl printed them in this project's runs (test_edge_verdicts_oci).
AGENT_BROKE_DPKG = [
    "E: Could not get lock /var/lib/dpkg/lock. It is held by process 43 (dpkg)",
    "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 113 (apt-get)",
    "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem.",
]
NOT_THE_AGENTS = [  # the process backend's read-only root, a network outage
    "E: Could not open lock file /var/lib/dpkg/lock-frontend - open (30: Read-only file system)",
    "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), are you root?",
    "curl: (6) Could not resolve host: astral.sh",
]
INDEX_DOWN = [
    "  Caused by: HTTP status server error (503 Service Unavailable) for url (http://i/simple/x/)",
    "curl: (22) The requested URL returned error: 502",
    "  503  Service Unavailable [IP: 151.101.2.132 80]",  # apt, under its Err: line
    "WARNING: Retrying (Retry(total=4)) after connection broken by 'ResponseError('too many 503 "
    "error responses')': /simple/pytest/",
    "W: Temporary failure resolving 'deb.debian.org'",
]


def test_the_bootstrap_evidence_tells_the_agents_doing_from_the_networks() -> None:
    from levelfield.outcome._grading import BOOTSTRAP_FAILURE, DPKG_BROKEN, TOOL_MISSING

    assert all(DPKG_BROKEN.search(line) for line in AGENT_BROKE_DPKG)
    assert not any(DPKG_BROKEN.search(line) for line in NOT_THE_AGENTS + INDEX_DOWN)
    assert all(BOOTSTRAP_FAILURE.search(line) for line in INDEX_DOWN)
    assert not any(BOOTSTRAP_FAILURE.search(line) for line in AGENT_BROKE_DPKG)
    python, pip = TOOL_MISSING["python"], TOOL_MISSING["pip"]
    assert python.search("/tests/test.sh: line 4: /usr/local/bin/pip: cannot execute: required "
                         "file not found")  # fmt: skip
    assert python.search("/tests/test.sh: line 8: python: command not found")
    assert pip.search("/tests/test.sh: line 4: pip: command not found")
    assert pip.search("/usr/local/bin/python3: No module named pip")
    assert not pip.search("ModuleNotFoundError: No module named 'pipeline'")
