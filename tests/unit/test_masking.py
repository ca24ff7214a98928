"""Secret masking: every known value, in text, bytes, stored records and files."""

from pathlib import Path

from levelfield.masking import MASK, Masker, known_secrets
from levelfield.records import PhaseResult
from levelfield.sandbox.scrub import mask_files

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
    assert mask_files(tmp_path, Masker().add(KEY)) == 1
    assert (tmp_path / "logs" / "agent.log").read_text() == f"key={MASK}\n"


def test_secret_names_the_way_ci_systems_read_them() -> None:
    environ = {
        "AWS_SECRET_ACCESS_KEY": "aws-secret-value-1",
        "STRIPE_KEY": "stripe-value-12",
        "GH_TOKEN": "ghp_abcdefgh12",
        "DJANGO_SECRET": "django-secret-9",
        "PGPASSWORD": "pg-password-77",
        "SMTP_PASSWORD_FILE": "/run/secrets/smtp",  # *PASSWORD*: masked, harmlessly
        "GCP_CREDENTIALS": "{json-credentials}",
        "DATABASE_URL": "postgres://app@db:5432/prod",
        "PIP_INDEX_URL": "https://ci:index-token-42@pypi.corp/simple",
        "HOME": "/root/not-a-secret",
        "KEYBOARD": "not-a-secret-either",
    }
    values = known_secrets(environ=environ).values
    assert "/root/not-a-secret" not in values and "not-a-secret-either" not in values
    assert values == {
        "aws-secret-value-1",
        "stripe-value-12",
        "ghp_abcdefgh12",
        "django-secret-9",
        "pg-password-77",
        "/run/secrets/smtp",
        "{json-credentials}",
        "postgres://app@db:5432/prod",
        "index-token-42",  # the password of a URL, whatever the variable's name
    }


def test_credentials_in_urls_are_masked_whatever_their_value() -> None:
    text = (
        "fetch https://user:tok3n-value@pypi.corp/simple/pip and "
        "git clone https://ghp_0123456789abcdefXYZ@github.com/o/r and ssh://git@github.com/o/r"
    )
    masked = Masker().text(text)
    assert "tok3n-value" not in masked and "ghp_0123456789abcdefXYZ" not in masked
    assert "https://user:***@pypi.corp/simple/pip" in masked
    assert "https://***@github.com/o/r" in masked
    assert "ssh://git@github.com/o/r" in masked  # a short user name is no credential


def _written(masker: Masker, parts: list[bytes]) -> bytes:
    import io

    sink = io.BytesIO()
    writer = masker.writer(sink)
    for part in parts:
        writer.write(part)
    writer.close()
    return sink.getvalue()


def test_a_secret_split_across_two_writes_never_reaches_the_sink() -> None:
    """Every split point of a log line holding the key and a URL credential, as a pipe may hand
    them over: the sink gets exactly what masking the whole line gives."""
    masker = Masker().add(KEY)
    line = f"key={KEY} url=https://ci:pass-word-9@host/x done\n".encode()
    whole = masker.data(line)
    assert KEY.encode() not in whole and b"pass-word-9" not in whole
    for cut in range(1, len(line)):
        assert _written(masker, [line[:cut], line[cut:]]) == whole, cut
    for cut in range(1, len(line) - 1):  # three writes
        parts = [line[:cut], line[cut : cut + 1], line[cut + 1 :]]
        assert _written(masker, parts) == whole, cut


def test_a_writer_holds_back_only_what_could_start_a_secret() -> None:
    import io

    sink = io.BytesIO()
    writer = Masker().add(KEY).writer(sink)
    writer.write(b"plain output\nsk-ant-")
    assert sink.getvalue() == b"plain output\n"  # the rest may be the key's start
    writer.write(b"other\n")
    assert sink.getvalue() == b"plain output\nsk-ant-other\n"
    writer.write(KEY[:12].encode())  # the key's first 12 characters, then the stream ends
    writer.close()
    assert sink.getvalue().endswith(b"\n***")


def test_a_secret_added_later_is_masked_by_writers_made_before() -> None:
    import io

    masker = Masker()
    sink = io.BytesIO()
    writer = masker.writer(sink)
    masker.add("levelfield-trial-0123456789")  # the proxy's token, once it exists
    writer.write(b"token levelfield-trial-0123456789\n")
    assert sink.getvalue() == b"token ***\n"
