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

    from levelfield.verifier import named_reports

    test_sh = """# pytest --junitxml /not/this.xml
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
python -m pytest --junitxml=report.xml --ctrf "$OUT/x.json" /tests
"""
    assert named_reports(test_sh, PurePosixPath("/app")) == [
        PurePosixPath("/logs/verifier/ctrf.json"),
        PurePosixPath("/app/report.xml"),
    ]
