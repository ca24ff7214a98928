"""Analysis results → what people read: terminal tables, JSON, a Markdown disclosure card and one
self-contained HTML page. Reports format the frozen results of `levelfield.analysis`; they never
compute a statistic themselves.

Names load on first use, so that importing `report.progress` for `levelfield run` does not pull
in matplotlib and the statistics stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from levelfield._lazy import lazy_exports

if TYPE_CHECKING:
    from levelfield.report.html import render_html
    from levelfield.report.jsonout import render_json
    from levelfield.report.markdown import render_card
    from levelfield.report.terminal import show_comparison, show_power, show_summary

_HOME = {
    "render_card": "markdown",
    "render_html": "html",
    "render_json": "jsonout",
    "show_comparison": "terminal",
    "show_power": "terminal",
    "show_summary": "terminal",
}
__all__ = [
    "render_card",
    "render_html",
    "render_json",
    "show_comparison",
    "show_power",
    "show_summary",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals())
