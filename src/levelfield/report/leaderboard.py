"""Leaderboard → what people read: a terminal table, Markdown, JSON (the page is in
leaderboard_html.py). Each says the same sentences (`findings`), so the README, the page and the
terminal cannot drift apart; numbers print as points with one decimal."""

from __future__ import annotations

import math
import statistics

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from levelfield.analysis import jsonable
from levelfield.analysis.standings import Entry, Gap, Leaderboard
from levelfield.report import _format as f
from levelfield.report import board_entries as be
from levelfield.report import board_tasks as bt

HEADER = (
    "rank",
    "entry",
    "tier",
    "score [95 % CI]",
    "board ±",
    "rank set",
    "marginal",
    "Δ next [CI]",
    "Holm p",
    "Δ #1 [CI]",
    "Holm p #1",
    "clean (rank)",
    "infra",
    "provider",
)


def render_json(board: Leaderboard) -> str:
    return jsonable.dumps(board)


def rows(board: Leaderboard) -> list[tuple[str, ...]]:
    """One row per entry, best first, in HEADER's order."""
    to_next = {g.pair.a: g for g in board.gaps if g.to == "next"}
    to_first = {g.pair.b: g for g in board.gaps if g.to == "first"}
    return [_row(e, to_next.get(e.label), to_first.get(e.label), board) for e in board.entries]


def _row(entry: Entry, nxt: Gap | None, first: Gap | None, board: Leaderboard) -> tuple[str, ...]:
    alpha = 1 - board.level
    return (
        str(entry.rank),
        entry.label,
        str(entry.tier),
        f.estimate(entry.score),
        "n/a" if math.isnan(entry.retry_se) else f"±{f.pts(entry.retry_se)}",
        _span(entry.simultaneous),
        _span(entry.marginal),
        _gap(nxt),
        _holm(nxt, alpha),
        _gap(first),
        _holm(first, alpha),
        f"{f.pts(entry.clean_score.mean)} ({entry.clean_rank})"
        + (" †" if entry.unclassified_rate > 0 else ""),
        f.pts(entry.infra_error_rate),
        entry.provider,
    )


def _span(bounds: tuple[int, int]) -> str:
    low, high = bounds
    return str(low) if low == high else f"{low}–{high}"


def _gap(gap: Gap | None) -> str:
    if gap is None:
        return ""
    e = gap.pair.estimate
    return f"{f.pts(e.diff, True)} {f.interval(e.ci, True)}"


def _holm(gap: Gap | None, alpha: float) -> str:
    if gap is None:
        return ""
    p = gap.pair.p_holm
    mark = " *" if p < alpha else ""
    # Three decimals near the threshold, so that 0.049 never prints as a distinguishable "0.05".
    return (f"{p:.3f}" if 0.01 <= p < 0.1 else f.p_value(p)) + mark


def findings(board: Leaderboard) -> list[str]:
    """The answer in sentences, each one a paragraph."""
    level = round(100 * board.level)
    first = board.ranks.could_be_first
    tiers = _tiers(board)
    d = board.detectable
    told = board.top_gaps_told_apart
    half = statistics.median(e.score.ci[1] - e.score.mean for e in board.entries)
    board_se = [e.retry_se for e in board.entries if not math.isnan(e.retry_se)]
    lines = [
        f"Could #1 be someone else? {len(first)} of {len(board.entries)} entries could be #1 "
        f"({level} % simultaneous rank sets): {', '.join(first)}.",
        bt.first_sentence(board),
        f"Of the {board.top - 1} adjacent gaps in the top {board.top}, {told} "
        f"{'is' if told == 1 else 'are'} distinguishable (paired by task, sign-flip p, Holm over "
        f"the {_family(board)} comparisons with the next entry and with #1).",
        f"Tiers ({board.n_tiers}; entries of one tier cannot be told apart, each entry of a tier "
        f"is proven worse than one of the tier above): {tiers}.",
        f"The smallest gap {d.repeats} trials × {d.n_tasks} tasks can detect (α {d.alpha:g}, "
        f"power {d.power:g}, from each adjacent pair's measured variances): {f.pts(d.gap)} "
        f"points (median over {d.n_pairs} pairs; {f.pts(d.gap_range[0])}–"
        f"{f.pts(d.gap_range[1])}), {f.pts(d.gap_all_adjacent)} with Bonferroni over those "
        f"pairs. No number of repeats brings it below {f.pts(d.floor)}: that part is how "
        "entries fare task by task, which only more tasks average out.",
    ]
    if board_se:
        lines.append(
            f"The leaderboard's ± is {f.pts(statistics.median(board_se))} points (median), the "
            f"half-width of levelfield's {level} % CI {f.pts(half)}. The ± is retry noise "
            "with the tasks held fixed: how much the score would move if the same agent re-ran "
            "these same tasks. The CI also counts that the tasks are a sample of the work the "
            "benchmark stands for; a claim that one entry is better than another at that work "
            "needs it. Two entries' ± bands that do not overlap do not make a gap real."
        )
    moved = sorted(
        (e for e in board.entries if abs(e.clean_rank - e.rank) >= 2),
        key=lambda e: -abs(e.clean_rank - e.rank),
    )
    if moved:
        shown = ", ".join(f"{e.label} {e.rank} → {e.clean_rank}" for e in moved[:6])
        lines.append(
            f"Ranked by clean score (infra errors left out), {len(moved)} entries move by two "
            f"places or more: {shown}" + (" …" if len(moved) > 6 else ".")
        )
    resting = [e for e in board.entries if e.unclassified_rate > 0]
    if resting:
        shown = ", ".join(
            f"{e.label} {e.clean_rank} → {e.clean_rank_if_agents}"
            for e in sorted(resting, key=lambda e: -e.unclassified_rate)[:6]
        )
        lines.append(
            f"† {len(resting)} entr{'y' if len(resting) == 1 else 'ies'}' clean scores rest on "
            "unclassified exceptions: trials booked as infra errors only because no row of the "
            "import's table knows their exception. Counted as the agent's failures, their clean "
            f"ranks would be: {shown}" + (" …" if len(resting) > 6 else ".")
        )
    lines.extend(bt.task_sentences(board))
    lines.extend(be.profile_sentences(board))
    lines.extend(_flag_sentences(board))
    if board.not_ranked:
        n = len(board.not_ranked)
        shown = "; ".join(
            f"{name.rstrip('/').rpartition('/')[2]} ({why})"
            for name, why in sorted(board.not_ranked.items())
        )
        lines.append(
            f"Not ranked: {n} submission folder{'s' * (n != 1)} of the imported leaderboard "
            f"{'hold' if n != 1 else 'holds'} no trial that could be read: {shown}."
        )
    if any(p.name != "unknown" for p in board.providers):
        lines.append(_provider_sentence(board))
    lines.extend(f"Not paired: {note}." for note in board.unpaired)
    return lines


# Import flags that change what an entry's figures mean (harbor/flags.py), said beside them.
BEARING_FLAGS = ("copied_attempts", "invalid_rewards", "duplicate_outcomes", "unreadable_trials")


def _flag_sentences(board: Leaderboard) -> list[str]:
    return [
        f"Flag on {label}: {kind}: {detail.rstrip('.')}."
        for label, kind, detail in flag_rows(board)
        if kind in BEARING_FLAGS
    ]


def flag_rows(board: Leaderboard) -> list[tuple[str, str, str]]:
    """Every flag the import raised, per ranked entry, in rank order: what a reader of each
    score should know (harbor/flags.py)."""
    return [
        (e.label, str(flag.get("kind", "")), str(flag.get("detail", "")))
        for e in board.entries
        for flag in e.flags
    ]


FLAGS_TITLE = "Import flags, every one per entry (the score still counts every trial)"


def _family(board: Leaderboard) -> int:
    return len({(g.pair.a, g.pair.b) for g in board.gaps})


def _tiers(board: Leaderboard) -> str:
    groups: dict[int, list[str]] = {}
    for entry in board.entries:
        groups.setdefault(entry.tier, []).append(entry.label)
    return "; ".join(
        f"tier {t}: {len(names)} ({names[0]} … {names[-1]})"
        if len(names) > 3
        else f"tier {t}: {', '.join(names)}"
        for t, names in sorted(groups.items())
    )


def _provider_sentence(board: Leaderboard) -> str:
    parts = ", ".join(
        f"{p.name} {len(p.entries)} (mean score {f.pts(p.score)}, infra errors "
        f"{f.pts(p.infra_error_rate)})"
        for p in board.providers
    )
    caveat = (
        " Each entry ran on one provider, so a provider's figures are its entries' figures: "
        "providers are confounded with submissions, and no difference between them can be "
        "told from a difference between the agents and models that chose them."
        if board.providers_confounded
        else ""
    )
    return f"Sandbox providers (a hidden variable): {parts}.{caveat}"


def unclassified_rows(board: Leaderboard) -> list[tuple[str, ...]]:
    """Entries whose clean score rests on unclassified exceptions: how much, and their clean
    score and rank if those trials counted as the agent's failures."""
    return [
        (
            e.label,
            f.pts(e.unclassified_rate),
            f"{f.pts(e.clean_score.mean)} ({e.clean_rank})",
            f"{f.pts(e.clean_if_agents)} ({e.clean_rank_if_agents})",
        )
        for e in sorted(board.entries, key=lambda e: -e.unclassified_rate)
        if e.unclassified_rate > 0
    ]


UNCLASSIFIED_HEADER = ("entry", "unclassified", "clean (rank)", "clean if the agent's (rank)")


def infra_rows(board: Leaderboard) -> list[tuple[str, str, str]]:
    """Entries with infra errors: their rate and its kinds, largest first."""
    out = []
    for entry in sorted(board.entries, key=lambda e: -e.infra_error_rate):
        if entry.infra_error_rate > 0:
            kinds = ", ".join(
                f"{kind} {f.pts(share)}"
                for kind, share in sorted(entry.infra_by_kind.items(), key=lambda kv: -kv[1])
            )
            out.append((entry.label, f.pts(entry.infra_error_rate), kinds))
    return out


def show_leaderboard(board: Leaderboard, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(
        title=f"Leaderboard: points, {round(100 * board.level)} % CIs clustered by task; rank "
        "sets simultaneous (marginal: each alone); Holm over the gaps shown (* = told apart)"
    )
    for name in HEADER:
        table.add_column(name, justify="left" if name in ("entry", "provider") else "right")
    for row in rows(board):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    for line in findings(board):
        console.print(escape(line), "", sep="\n")
    infra = infra_rows(board)
    if infra:
        kinds = Table(title=f"Infra error rate by kind ({INFRA_UNIT})")
        for name in ("entry", "infra", "by kind"):
            kinds.add_column(name, justify="right" if name == "infra" else "left")
        for row in infra:
            kinds.add_row(*(escape(cell) for cell in row))
        console.print(kinds)
    flagged = flag_rows(board)
    if flagged:
        table = Table(title=FLAGS_TITLE)
        for name in ("entry", "flag", "detail"):
            table.add_column(name)
        for row in flagged:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
    _print_table(console, be.ENTRIES_TITLE, be.ENTRIES_HEADER, be.entry_rows(board))
    _print_table(console, bt.TASKS_TITLE, bt.TASKS_HEADER, bt.task_rows(board))
    resting = unclassified_rows(board)
    if resting:
        table = Table(title=f"† Clean scores resting on unclassified exceptions ({INFRA_UNIT})")
        for name in UNCLASSIFIED_HEADER:
            table.add_column(name, justify="left" if name == "entry" else "right")
        for row in resting:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)


def _print_table(
    console: Console, title: str, header: tuple[str, ...], body: list[tuple[str, ...]]
) -> None:
    table = Table(title=title)
    for name in header:
        left = name in ("task", "decides", "entry", "agent", "model")
        table.add_column(name, justify="left" if left else "right")
    for row in body:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)


INFRA_UNIT = "points: the mean over tasks of each task's share of trials, as the score"


def render_markdown(board: Leaderboard) -> str:
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" if h in ("entry", "provider") else "--:" for h in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows(board)]
    return "\n".join([*lines, "", details_markdown(board)])


def details_markdown(board: Leaderboard) -> str:
    """Everything after the main table: the findings and the tables of infra errors by kind and
    of clean scores resting on unclassified exceptions."""
    lines = [*(line + "\n" for line in findings(board))]
    infra = infra_rows(board)
    if infra:
        lines += [f"Infra error rate by kind ({INFRA_UNIT}):", ""]
        lines += ["| entry | infra | by kind |", "|---|--:|---|"]
        lines += [f"| {_md(a)} | {b} | {_md(c)} |" for a, b, c in infra]
    resting = unclassified_rows(board)
    if resting:
        lines += ["", f"† Clean scores resting on unclassified exceptions ({INFRA_UNIT}):", ""]
        lines += ["| " + " | ".join(UNCLASSIFIED_HEADER) + " |", "|---|--:|--:|--:|"]
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in resting]
    flagged = flag_rows(board)
    if flagged:
        lines += ["", f"{FLAGS_TITLE}:", "", "| entry | flag | detail |", "|---|---|---|"]
        lines += [f"| {_md(a)} | {_md(b)} | {_md(c)} |" for a, b, c in flagged]
    lines += ["", f"{be.ENTRIES_TITLE}:", "", "| " + " | ".join(be.ENTRIES_HEADER) + " |"]
    lines += ["|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in be.entry_rows(board)]
    lines += ["", f"{bt.TASKS_TITLE}:", "", "| " + " | ".join(bt.TASKS_HEADER) + " |"]
    lines += ["|---|--:|--:|--:|--:|---|"]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in bt.task_rows(board)]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")
