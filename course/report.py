"""Score tables, CSV and charts from graded results (the demo and `course grade` share them)."""
from __future__ import annotations

from pathlib import Path

from .cells import is_bonus
from .grading import StudentResult


def _cell_text(c) -> str:
    if c is None:
        return "-"
    if c.score is None:
        return "manual"
    return f"{c.score:g}/{c.max_score:g}"


def score_table(results: list[StudentResult], cell_order: list[str]) -> str:
    """Rows: grade cells; columns: students. Plain text, so it reads in any terminal or log."""
    names = [r.student for r in results]
    width = max([len(c) for c in cell_order] + [16])
    colw = [max(len(n), 7) for n in names]
    lines = ["  ".join(["grade cell".ljust(width)] + [n.rjust(w) for n, w in zip(names, colw)])]
    lines.append("-" * len(lines[0]))
    for gid in cell_order:
        row = [gid.ljust(width)]
        for r, w in zip(results, colw):
            row.append(("ERROR" if r.error else _cell_text(r.cells.get(gid))).rjust(w))
        lines.append("  ".join(row))
    lines.append("-" * len(lines[0]))
    auto_max = {gid: c.max_score for r in results for gid, c in r.cells.items() if not c.manual}
    total_max = sum(auto_max.values())
    # Optional stretch exercises (grade ids `bonus_*`) are not needed for full marks: the core
    # total is out of the core cells only, and the bonus points are shown apart.
    for label, keep in [("autograded total", lambda g: True), ("core", lambda g: not is_bonus(g)),
                        ("bonus (optional)", is_bonus)]:
        cells_max = sum(m for g, m in auto_max.items() if keep(g))
        if label != "autograded total" and not any(is_bonus(g) for g in auto_max):
            continue
        row = [label.ljust(width)]
        for r, w in zip(results, colw):
            got = sum(c.score or 0 for g, c in r.auto_cells.items() if keep(g))
            row.append(("ERROR" if r.error else f"{got:g}/{cells_max:g}").rjust(w))
        lines.append("  ".join(row))
    return "\n".join(lines)



def lost_cells(result: StudentResult) -> list[str]:
    return [gid for gid, c in result.auto_cells.items() if not c.full]


def chart(results: list[StudentResult], cell_order: list[str], path: Path, title: str) -> Path:
    """A heatmap of the fraction of points each student earned in each grade cell."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.full((len(cell_order), len(results)), np.nan)
    for j, r in enumerate(results):
        for i, gid in enumerate(cell_order):
            c = r.cells.get(gid)
            if c is not None and c.score is not None and c.max_score:
                data[i, j] = c.score / c.max_score
    fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(results), 1.2 + 0.38 * len(cell_order)))
    im = ax.imshow(data, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(results)), [r.student for r in results], rotation=20, ha="right")
    ax.set_yticks(range(len(cell_order)), cell_order)
    for i in range(len(cell_order)):
        for j in range(len(results)):
            c = results[j].cells.get(cell_order[i])
            ax.text(j, i, _cell_text(c), ha="center", va="center", fontsize=8)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="fraction of the cell's points")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pass_rates(results: list[StudentResult], cell_order: list[str]) -> dict[str, float]:
    """Fraction of graded students with full marks in each autograded cell."""
    graded = [r for r in results if not r.error]
    rates = {}
    for gid in cell_order:
        cells = [r.cells[gid] for r in graded if gid in r.cells and not r.cells[gid].manual]
        if cells:
            rates[gid] = sum(c.full for c in cells) / len(cells)
    return rates


def pass_rate_chart(results: list[StudentResult], cell_order: list[str], path: Path, title: str) -> Path:
    """Which TODOs most students fail: a bar per grade cell, sorted from hardest."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted(pass_rates(results, cell_order).items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(rates)))
    ax.barh([k for k, _ in rates], [100 * v for _, v in rates], color="#4c72b0")
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of {sum(not r.error for r in results)} graded students with full marks")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
