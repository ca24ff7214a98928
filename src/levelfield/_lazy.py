"""Names a package exports but loads on first use: its statistics or plotting stack costs over a
second to import, and a command that needs none of it (`levelfield run`) should not pay for it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's `__getattr__` and `__dir__`: `homes` maps each exported name to the module
    (within `package`) that defines it. A name is looked up in its home each time, so that it
    is the same object whichever way it is reached; no export may share a name with a module of
    the package, or the module would shadow it once imported."""

    def getattr_(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    def dir_() -> list[str]:
        return sorted([*namespace, *homes])

    return getattr_, dir_
