"""A trial's processes start with every signal's default handling, as a container's do.

Ignored signals and the blocked mask pass through fork and exec. A harness started in the
background of a shell (`cmd &`, as CI scripts do) ignores SIGINT and SIGQUIT, under nohup also
SIGHUP, and Python ignores SIGPIPE and SIGXFSZ in itself. Handed on to a trial, a test that
stops a program with SIGINT waits in vain (TB2's cancel-async-tasks then fails its oracle), and
`yes | head -1` fails under `pipefail` where in a container it passes: an outcome that depends on
how the harness was started. So every command a trial runs on the host's side of a sandbox
passes through RESET right before its exec; an engine's exec starts from the engine's defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

RESET = """\
import signal
for _signal in signal.valid_signals():
    try:
        signal.signal(_signal, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL, SIGSTOP, the C library's own
        pass
signal.pthread_sigmask(signal.SIG_SETMASK, ())
"""

_EXEC = "import os, sys\nos.execvp(sys.argv[1], sys.argv[1:])\n"


def default_argv(argv: Sequence[str]) -> list[str]:
    """`argv`, started with every signal's default handling and none blocked."""
    return [sys.executable, "-I", "-S", "-c", RESET + _EXEC, *argv]
