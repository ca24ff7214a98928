"""The folders where trials keep their files on this host, whichever run or harness wrote them:
hidden whole from every `process` sandbox and grader.

A process sandbox sees the host's /var, /srv, /opt and /etc read-only, so a run kept under
/var/tmp or /srv would show its trials' logs, records and the agent's work to the agent of
another run: another trial's solution for the same task, to copy. Its own run directory is
hidden by the backend, but not the others'. So each folder of trials carries a mark (`MARK`), and
is listed in a registry on the host's /run while it is written: the walk of the host's private
entries (`_bwrap.host_private_entries`) covers a marked folder found there and does not descend
into it; the registry adds those made after that walk, which is made once per process.

Covering a folder whole also keeps its short-lived files (a log's ring while it is cut) out of
the list of files to cover one by one: a file listed and gone before bubblewrap binds /dev/null
on it fails the sandbox's start, an infrastructure error one trial owed to another.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

MARK = ".levelfield-trials"
REGISTRY = Path("/run/levelfield/trial-roots")
_SAID = "Trials of levelfield keep their files here: hidden from every process sandbox.\n"


def mark(folder: Path) -> None:
    """Mark `folder` and register it, unless a folder above it is marked already (a run's
    directory holds its trials); both best effort (a registry that cannot be written leaves
    the mark, which the next process's walk finds)."""
    folder = folder.resolve()
    if any((above / MARK).is_file() for above in folder.parents):
        return
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / MARK).exists():
            (folder / MARK).write_text(_SAID)
    link = REGISTRY / hashlib.sha256(str(folder).encode()).hexdigest()[:24]
    with contextlib.suppress(OSError):
        REGISTRY.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            os.symlink(folder, link)


def registered() -> list[Path]:
    """The registered folders that still exist (a registry entry of a deleted one is dropped)."""
    found = []
    with contextlib.suppress(OSError):
        for link in REGISTRY.iterdir():
            with contextlib.suppress(OSError):
                folder = Path(os.readlink(link))
                if (folder / MARK).is_file():
                    found.append(folder)
                else:
                    link.unlink()
    return found
