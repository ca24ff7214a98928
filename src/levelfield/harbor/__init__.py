"""Harbor interop: Harbor's jobs, submissions and leaderboards read as levelfield runs.

`importing` assembles the import from one module per concern: `layout` (which folders hold
trials, and which submission each belongs to), `trial_file` (one trial folder's facts, with
`result_fields` the fields it keeps of a result.json), `reasons` (Harbor's exception types →
the agent's failure or infrastructure) and `flags` (what looks wrong with a submission, with
`copies` for attempts that are one run copied), with `beside` reading what lies next to a
trial's result.json. `task_features` refuses the tasks using a feature of Harbor's task format
that no levelfield backend runs (sidecar services, a separate grader, ...), wherever a trial of
one would be planned.

`LevelfieldEnvironment` runs Harbor's trials on levelfield's sandboxes (`harbor run -e
levelfield.harbor:LevelfieldEnvironment`): `environment` (the only module that imports Harbor,
the `harbor` extra, Python >= 3.12) over `box`, `options`, `record` and `leftovers`. It is loaded
when the name is first asked for, so that `levelfield.harbor` and the import need no Harbor.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LevelfieldEnvironment":
        try:
            from levelfield.harbor.environment import LevelfieldEnvironment
        except ImportError as exc:
            raise ImportError(
                f"levelfield.harbor.LevelfieldEnvironment needs Harbor ({exc}): "
                "pip install 'levelfield[harbor]' (Harbor needs Python >= 3.12)"
            ) from exc
        return LevelfieldEnvironment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
