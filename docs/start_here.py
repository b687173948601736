"""Run the code of docs/start_here.md and draw its figures.

    python docs/start_here.py   # writes docs/figures/start_here_{silos,tradeoff}.png and start_here_tradeoff.csv

The page's ```python blocks run in order, in one namespace, in a fresh temporary directory (as a
reader would run them); the figures are drawn from the objects they leave behind (``uniform``,
``fed`` and ``tradeoff``), so the page and its figures cannot disagree. The trade-off figure's
points are also written to ``start_here_tradeoff.csv`` (:data:`TRADEOFF_CSV`), and the PNG records
that file's SHA-256 (:data:`DATA_KEY`), so that the figures the page's prose quotes can be checked
against the run the figure shows (tests/test_docs.py). tests/test_start_here.py runs the same
blocks through :func:`python_blocks` / :func:`run_page`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

PAGE = Path(__file__).with_name("start_here.md")
FIGURES = Path(__file__).with_name("figures")
#: The plotted points of the trade-off figure: epsilon ("1.0", "3.0", "none"), lam, test_error,
#: demographic_parity_difference; one row per fit of the page's trade-off block.
TRADEOFF_CSV = "start_here_tradeoff.csv"
#: The PNG text key under which the trade-off figure records the SHA-256 of :data:`TRADEOFF_CSV`.
DATA_KEY = "pfair-data-sha256"


def python_blocks(page: Path = PAGE) -> list[str]:
    """The ```python code blocks of ``page``, in order."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def shell_commands(page: Path = PAGE) -> list[str]:
    """The command lines of the page's ```bash blocks."""
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def run_page(workdir: Optional[Path] = None, edit: Callable[[str], str] = lambda code: code) -> dict[str, Any]:
    """Execute the page's python blocks in ``workdir`` (default: a new temporary directory), each
    passed through ``edit`` first (the test uses it to shorten training); return the namespace."""
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="start_here_"))
    namespace: dict[str, Any] = {"__name__": "__start_here__"}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for i, code in enumerate(python_blocks()):
            exec(compile(edit(code), f"{PAGE.name}[block {i + 1}]", "exec"), namespace)
    finally:
        os.chdir(cwd)
    return namespace


def draw(ns: dict[str, Any], out: Path = FIGURES) -> list[Path]:
    """The two figures of the page, from the namespace :func:`run_page` returned."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out.mkdir(parents=True, exist_ok=True)
    ds = ns["ds"]
    women = ds.group_names.index("Female")  # describe() names groups and classes by their codes
    paths = []

    fig = Figure(figsize=(9, 3.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    for label, fed, colour in (("h = 0", ns["uniform"], "#999999"), ("h = 0.75", ns["fed"], "#1f77b4")):
        d = fed.describe()
        offset = -0.2 if label == "h = 0" else 0.2
        x = d.index.to_numpy() + offset
        axes[0].bar(x, d["mean(age)"], width=0.4, color=colour, label=label)
        axes[1].bar(x, d[f"p(s={women})"], width=0.4, color=colour)
        axes[2].bar(x, d["p(y=1)"], width=0.4, color=colour)
    for ax, title in zip(axes, ("mean age", "share of women", "share with income >50K")):
        ax.set_title(title)
        ax.set_xticks(range(3), [f"silo {k}" for k in range(3)])
    axes[0].set_ylim(20, 60)
    axes[0].legend(frameon=False)
    fig.tight_layout()
    paths.append(out / "start_here_silos.png")
    fig.savefig(paths[-1], dpi=110)

    t = ns["tradeoff"]
    paths.append(out / TRADEOFF_CSV)
    t[["epsilon", "lam", "test_error", "demographic_parity_difference"]].to_csv(paths[-1], index=False,
                                                                                float_format="%.6f")
    digest = hashlib.sha256(paths[-1].read_bytes()).hexdigest()

    fig = Figure(figsize=(5.5, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for eps, style, label in (("1.0", "o-", "epsilon = 1 per silo"), ("3.0", "^-", "epsilon = 3 per silo"),
                              ("none", "s--", "non-private")):
        part = t[t["epsilon"].astype(str) == eps]
        ax.plot(part["demographic_parity_difference"], part["test_error"], style, label=label)
        for _, row in part.iterrows():
            ax.annotate(f"λ={row['lam']:g}", (row["demographic_parity_difference"], row["test_error"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)
    trivial = ns["report"]["trivial_error"]
    ax.axhline(trivial, color="grey", lw=0.8, ls=":")
    ax.text(ax.get_xlim()[1], trivial, "always predict <=50K ", ha="right", va="bottom", fontsize=8, color="grey")
    ax.set_xlabel("demographic_parity_difference (test)")
    ax.set_ylabel("test error")
    ax.set_title("Adult, 3 silos by age (h = 0.75), one run per point")
    ax.legend(frameon=False, loc="upper left")
    fig.tight_layout()
    paths.append(out / "start_here_tradeoff.png")
    fig.savefig(paths[-1], dpi=110, metadata={DATA_KEY: digest})
    return paths


if __name__ == "__main__":
    for path in draw(run_page()):
        print(path)
