"""Byte sizes as people write them ("2G", "512m", "1.5GiB") and back.

Binary units throughout, as Docker and Kubernetes read "2G"/"2Gi" for memory: 1 G = 2**30 bytes.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b?)?\s*$", re.IGNORECASE)
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_bytes(text: str) -> int:
    """'2G' → 2147483648; a bare number is bytes. Raises ValueError for anything else."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (expected e.g. 512m, 2g, 1.5GiB)")
    number, unit = match.groups()
    return int(float(number) * 1024 ** _POWER[unit.lower()])


def format_bytes(n: float | None) -> str:
    """Short human form for tables: 1536 MiB → '1.5G'."""
    if n is None or n != n:  # None or NaN
        return "-"
    for unit, power in (("G", 3), ("M", 2), ("K", 1)):
        if abs(n) >= 1024**power:
            return f"{n / 1024**power:.3g}{unit}"
    return f"{int(n)}B"
