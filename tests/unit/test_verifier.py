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
