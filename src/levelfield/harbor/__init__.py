"""Harbor interop: Harbor's job folders read as levelfield runs (`importing`), and
`LevelfieldEnvironment`, which runs Harbor's trials on levelfield's sandboxes
(`harbor run -e levelfield.harbor:LevelfieldEnvironment`).

Only `environment.py` imports Harbor (the `harbor` extra, Python >= 3.12); it is loaded when the
name is first asked for, so that `levelfield.harbor` imports, and a job imports, without Harbor.
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
