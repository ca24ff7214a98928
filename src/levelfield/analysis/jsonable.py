"""Analysis results → JSON-ready values.

JSON has no NaN or infinity: NaN (undefined: an SE from one task) becomes null, and an infinite
ceiling (uncapped) becomes the string "inf", so a reader can tell "unknown" from "no limit".
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Dataclasses → dicts (field order kept), tuples → lists, numpy scalars → Python."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def dumps(value: Any) -> str:
    """Strict JSON text (no NaN tokens), indented for people and diff tools."""
    return json.dumps(to_jsonable(value), indent=2, allow_nan=False)
