"""Whether a disk filled: decided by the disks' own readings, never by what a phase printed.

"No space left on device" in a phase's output is the agent's own words unless a disk shows it: the
sampler sees a disk that stayed full, and a disk that filled and emptied between two samples
still left its blocks in its image (`storage_written_bytes`). One rule for every path: the
native runner, a hosted sandbox's exec, an import.
"""

from __future__ import annotations

from levelfield.outcome._log import PhaseLog
from levelfield.records import Evidence

ENOSPC_TEXT = "No space left on device"
# A disk whose image holds all but this much of its ceiling may have been full between samples.
COULD_FILL_SLACK_BYTES = 4 << 20
COULD_FILL_SLACK_FRACTION = 0.10


def with_log_evidence(log: PhaseLog) -> Evidence | None:
    """A full disk is decided by the disks' own readings, never by what a phase printed. The
    sampler sees a disk that stayed full; a disk that filled and emptied between two samples
    still left its blocks in the disk's image (`storage_written_bytes`), and then the phase's
    "No space left on device" tells the two apart. Printed under a disk that never came near
    full, the words are the agent's own and change nothing: the evidence says so."""
    evidence = log.evidence
    if evidence is not None and evidence.host_disk_full and not evidence.storage_full:
        least = evidence.host_disk_free_min_bytes or 0
        note = (
            f"the host filesystem taking the trial's uncapped writes fell to {least >> 20} MiB "
            "free: the host's or the engine's disk ran out, not a ceiling of the trial's"
        )
        return evidence.model_copy(update={"notes": (*evidence.notes, note)})
    if evidence is None or evidence.storage_full:
        return evidence
    setup = log.setup.phase if log.setup is not None else None
    tails = [p.output_tail for p in (setup, log.agent, log.verifier) if p is not None]
    if not any(ENOSPC_TEXT in tail for tail in tails):
        return evidence
    ceiling, written = evidence.storage_ceiling_bytes, evidence.storage_written_bytes
    if ceiling is not None and written is not None and could_have_filled(written, ceiling):
        note = (
            f"'{ENOSPC_TEXT}' in the phase output, and the trial's disk held {written >> 20} "
            f"MiB of its {ceiling >> 20} MiB ceiling at some point: it filled between two samples"
        )
        return evidence.model_copy(update={"storage_full": True, "notes": (*evidence.notes, note)})
    return evidence.model_copy(update={"notes": (*evidence.notes, _no_full_disk(evidence))})


def could_have_filled(written_bytes: int, ceiling_bytes: int) -> bool:
    slack = max(COULD_FILL_SLACK_BYTES, COULD_FILL_SLACK_FRACTION * ceiling_bytes)
    return written_bytes >= ceiling_bytes - slack


def _no_full_disk(evidence: Evidence) -> str:
    seen = []
    if evidence.storage_ceiling_bytes is not None and evidence.storage_written_bytes is not None:
        seen.append(
            f"the trial's disk never held more than {evidence.storage_written_bytes >> 20} MiB "
            f"of its {evidence.storage_ceiling_bytes >> 20} MiB ceiling"
        )
    if evidence.host_disk_free_min_bytes is not None:
        seen.append(
            f"the host filesystem taking its uncapped writes kept at least "
            f"{evidence.host_disk_free_min_bytes >> 20} MiB free"
        )
    found = "; ".join(seen) or "no disk reading shows a full disk"
    return f"'{ENOSPC_TEXT}' in the phase output, but {found}: not a full disk"
