"""A simulated inventory service: 6,000 records, each request answered after two seconds.

`fetch(sku)` blocks its thread for the round trip; `await afetch(sku)` is the asyncio client.
Both return the record's stock level (an int), which is a pure function of the SKU.
"""

import asyncio
import hashlib
import time

SKUS = 6_000
ROUND_TRIP_S = 2.0


def _stock(sku: int) -> int:
    return int.from_bytes(hashlib.sha256(b"sku-%d" % sku).digest()[:2], "big") % 500


def fetch(sku: int) -> int:
    time.sleep(ROUND_TRIP_S)
    return _stock(sku)


async def afetch(sku: int) -> int:
    await asyncio.sleep(ROUND_TRIP_S)
    return _stock(sku)
