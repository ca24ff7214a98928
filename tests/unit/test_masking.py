"""Secret masking: every known value, in text, bytes, stored records and files."""

from pathlib import Path

from levelfield.masking import MASK, Masker, known_secrets
from levelfield.records import PhaseResult

KEY = "sk-ant-secret-0123456789"


def test_known_secrets_take_secret_named_variables_and_extra_values() -> None:
    masker = known_secrets(
        "file-key-abcdefgh",
        environ={"ANTHROPIC_API_KEY": KEY, "GH_TOKEN": "ghp_abcdefgh12", "HOME": "/root/long"},
    )
    assert masker.values == {KEY, "ghp_abcdefgh12", "file-key-abcdefgh"}


def test_short_values_are_not_masked_everywhere() -> None:
    assert Masker().add("1", None, "").values == set()


def test_a_key_containing_another_is_masked_whole() -> None:
    masker = Masker().add("abcdefgh", "abcdefgh-longer")
    assert masker.text("x abcdefgh-longer y abcdefgh") == f"x {MASK} y {MASK}"


def test_a_secret_equal_to_a_field_name_masks_values_only() -> None:
    phase = PhaseResult(exit_code=0, output_tail="output_tail")
    assert Masker().add("output_tail").record(phase).output_tail == MASK


def test_records_are_masked_in_every_string_even_with_quotes() -> None:
    tricky = 'sk-"quoted"\\key-99'
    phase = PhaseResult(exit_code=0, output_tail=f"using key {KEY} and {tricky}")
    masked = Masker().add(KEY, tricky).record(phase)
    assert masked.output_tail == f"using key {MASK} and {MASK}"
    assert Masker().record(phase) is phase


def test_files_are_rewritten_only_where_a_secret_is(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "agent.log").write_text(f"key={KEY}\n")
    (tmp_path / "clean.txt").write_text("nothing here\n")
    (tmp_path / "link").symlink_to(tmp_path / "logs" / "agent.log")
    assert Masker().add(KEY).files(tmp_path) == 1
    assert (tmp_path / "logs" / "agent.log").read_text() == f"key={MASK}\n"
