"""The event queue's export: 60,000 order events of about 1 KiB each, deterministic.

A message is "id,day,cents,payload". The queue delivers at least once: `deliveries()` yields
every message, plus redeliveries of a share of them that depends on consumer timeouts and changes
from run to run — here drawn from the operating system's random source (random.SystemRandom):
0 to 100 % of the messages come twice.
"""

import hashlib
import random

EVENTS = 60_000
DAYS = 30


def message(event_id: int) -> str:
    """A freshly decoded message (a new object on every delivery, as off the wire)."""
    digest = hashlib.sha256(b"%d" % event_id).hexdigest()
    day, cents = int(digest[:8], 16) % DAYS, int(digest[8:16], 16) % 100_000
    return f"{event_id},{day},{cents}," + digest * 14


def deliveries():
    redelivered = random.SystemRandom().random()
    rng = random.Random()  # which messages come back differs per run too
    for event_id in range(EVENTS):
        yield message(event_id)
        if rng.random() < redelivered:
            yield message(event_id)
