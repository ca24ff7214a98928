"""The `levelfield` command line: thin typer commands over the library.

`app` assembles the groups: `running` (run, sweep, campaign), `analysis` (results, report, compare,
power), `tasks`, `images`, `importing` (import harbor), `operations` (doctor, reap) and
`scripted_model`. Beneath the commands: `_options` (shared option types and parsing),
`_console` (output and reading a stored run) and `_execute` (running a configuration, interrupts).
Imports point down only: no command module imports `app` or another command module.
"""

from __future__ import annotations


def main() -> None:
    """The console script's entry point (`levelfield = "levelfield.cli:main"`)."""
    from levelfield.cli.app import main as run_app

    run_app()
