"""Analysis results → JSON for `--json`: the same frozen structures the other reports format,
field for field. NaN (undefined) is null; an infinite ceiling (uncapped) is the string "inf"."""

from __future__ import annotations

from levelfield.analysis import jsonable
from levelfield.analysis.paired import Comparison
from levelfield.analysis.power import PowerAnalysis
from levelfield.analysis.summary import RunSummary


def render_json(result: RunSummary | Comparison | PowerAnalysis | tuple[Comparison, ...]) -> str:
    return jsonable.dumps(result)
