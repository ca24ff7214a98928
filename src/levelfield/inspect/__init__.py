"""Inspect AI interop: levelfield's sandbox for Inspect evals, and Inspect logs read as runs.

    config.py     SandboxConfig (what `sandbox=("levelfield", ...)` or `--sandbox levelfield:...`
                  says) and the levelfield task a sample runs as
    sandbox.py    the `levelfield` sandbox environment (`@sandboxenv`), over hosted/sandbox.py
    _registry.py  what Inspect's entry point loads, so that `levelfield` is found by name
    importing.py  `levelfield import inspect LOG.eval...`: an Inspect log's samples as trials

`sandbox.py` and `importing.py` import Inspect (the `inspect` extra); `SandboxConfig` does not,
so a task file can name it wherever levelfield is installed.
"""

from __future__ import annotations

from levelfield.inspect.config import SandboxConfig

__all__ = ["SandboxConfig"]
