"""The CLI reference page, written at build time from the commands themselves: each command's
`--help` as the installed `levelfield` prints it, so the page cannot drift from the code."""

from __future__ import annotations

import os

import typer
from typer.testing import CliRunner

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, **_: object) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _reference())


def _reference() -> str:
    from levelfield.cli.app import app

    root = typer.main.get_command(app)
    sections = [_section(path) for path in _commands(root, ())]
    return "\n\n".join(sections)


def _commands(command: object, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every command's path, a group's before its subcommands (Typer's click groups are
    told by their `commands`: Typer carries a click of its own)."""
    subs = getattr(command, "commands", None)
    if subs is None:
        return [path]
    found = [path]
    for name in sorted(subs):
        if not subs[name].hidden:
            found += _commands(subs[name], (*path, name))
    return found


def _section(path: tuple[str, ...]) -> str:
    from levelfield.cli.app import app

    os.environ["COLUMNS"] = "80"
    os.environ["NO_COLOR"] = "1"
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="levelfield", terminal_width=80)
    text = "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())
    heading = "#" * min(len(path) + 2, 4)
    name = " ".join(("levelfield", *path))
    return f"{heading} `{name}`\n\n```text\n{text}\n```"
