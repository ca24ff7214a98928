"""Loaded by Inspect through the package's `inspect_ai` entry point: registers the `levelfield`
sandbox environment, so that `--sandbox levelfield` and `sandbox="levelfield"` find it."""

from levelfield.inspect.sandbox import LevelfieldSandbox

__all__ = ["LevelfieldSandbox"]
