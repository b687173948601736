"""The documentation stays true: the user performance page is short and quotes only figures the
developers' notebook measured (or that follow from today's settings), links between the docs
resolve, a section cited by name in a performance page exists there, the generated tables of the
pages are what their scripts print, and the figures docs/start_here.md quotes are those of the run
its figure draws."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
USER_PAGE = DOCS / "performance.md"
NOTEBOOK = DOCS / "dev" / "performance-notebook.md"
#: A figure as written on the pages: 2.00, 11,304, 1.75–2.0, 0.360.
NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:[–-]\d+(?:[.,]\d+)*)?")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+\s+(.+)$", page.read_text(), flags=re.M)}


def test_the_user_performance_page_is_short_and_points_to_the_notebook():
    text = USER_PAGE.read_text()
    assert len(text.splitlines()) <= 120
    assert "(dev/performance-notebook.md)" in text and "make bench" in text
    for knob in ("batch", "RAYON_NUM_THREADS", "float32", "party loop", "Deployment"):
        assert knob in text, knob
    assert len(NOTEBOOK.read_text().splitlines()) > 800  # the notebook, moved whole


def _adult_private_epoch() -> tuple[int, int]:
    """(largest silo, rounds an epoch) of a private fit at λ > 0 on Adult's three silos at today's
    defaults: the batch is min(AUTO_BATCH_PRIVATE, smallest training share), the rounds are the
    run plan's ⌈mean training share / batch⌉, the training share a silo's records less its held-out
    ones (validation_share)."""
    from pfair import Federation, datasets
    from pfair.protocol.plan import rounds_per_epoch
    from pfair.settings import AUTO_BATCH_PRIVATE, SteFFLeSettings
    from pfair.validation import training_sizes

    defaults = SteFFLeSettings()
    sizes = Federation.for_dataset(datasets.load_adult(), 3).sizes
    train = training_sizes(sizes, defaults.validation_share)
    return max(sizes), rounds_per_epoch(defaults.sampling, train, min(AUTO_BATCH_PRIVATE, min(train)))


def test_every_figure_of_the_user_page_is_one_the_notebook_states_or_the_settings_give():
    from pfair.settings import AUTO_BATCH_NONPRIVATE, AUTO_BATCH_PRIVATE

    notebook, page = NOTEBOOK.read_text(), " ".join(USER_PAGE.read_text().split())
    largest, rounds = _adult_private_epoch()
    assert f"(up to {largest:,} records," in page and f"runs {rounds} rounds an epoch" in page, (largest, rounds)
    derived = {str(AUTO_BATCH_PRIVATE), str(AUTO_BATCH_NONPRIVATE), f"{largest:,}", str(rounds)}
    unknown = sorted({n for n in NUMBER.findall(page) if n not in notebook} - derived)
    assert not unknown, f"figures on docs/performance.md that docs/dev/performance-notebook.md does not state: {unknown}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve()
        assert linked.exists(), f"{page.name}: link to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: no section #{anchor} in {path}"


def test_sections_cited_by_name_exist_in_the_page_cited():
    cited = re.compile(r"`docs/((?:dev/)?performance(?:-notebook)?\.md)`,\s+\"([^\"]+)\"")
    for page in _pages():
        for path, name in cited.findall(page.read_text()):
            target = (DOCS.parent / "docs" / path).read_text()
            name = " ".join(name.split())
            starts = [" ".join(h.split()) for h in re.findall(r"^#+\s+(.+)$", target, flags=re.M)]
            starts += [" ".join(b.split()) for b in re.findall(r"^\*\*(.+?)\*\*", target, flags=re.M | re.S)]
            assert any(s.startswith(name) for s in starts), f"{page.name}: {path} has no section {name!r}"


# --------------------------------------------------------------------------------------------
# Generated tables and figures
# --------------------------------------------------------------------------------------------

#: (script, page): the table the script prints stands, verbatim and whole, on the page (as
#: tests/test_model_selection.py checks docs/model_selection_accounts.py's). The slow
#: docs/postprocessing_tables.py (120 seeded fits, minutes) is not here: it is checked by hand.
GENERATED_TABLES = [("docs/accounting_table.py", "docs/privacy.md"), ("docs/pld_table.py", "docs/accounting.md")]


@pytest.mark.parametrize("script, page", GENERATED_TABLES, ids=[s for s, _ in GENERATED_TABLES])
def test_a_generated_table_is_what_its_script_prints(script, page):
    from support import script_output

    table = script_output(script).strip()
    text = (ROOT / page).read_text()
    assert f"`python {script}`" in text, f"{page} does not name the command of its table"
    missing = [row for row in table.splitlines() if row not in text.splitlines()]
    assert table in text, f"{page} does not show the table `python {script}` prints (regenerate it); rows: {missing}"


#: A generated block pasted from a script's printout: ``<!-- generated:NAME -->``, then
#: ``<!-- from PATH -->``, the table, ``<!-- /generated:NAME -->``.
FROM_LOG = re.compile(r"<!-- generated:([\w-]+) -->\n<!-- from (\S+) -->\n(.*?)<!-- /generated:\1 -->", re.S)
#: A signed figure of a table's cell: 0.035, +0.198, -0.048, 1,024.
SIGNED = re.compile(r"[-+]?\d+(?:[.,]\d+)*")


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(x in it for x in short)


def _blocks_from_logs() -> list[tuple[str, str, str, str]]:
    return [(page.relative_to(ROOT).as_posix(), *m.groups()) for page in _pages()
            for m in FROM_LOG.finditer(page.read_text())]


BLOCKS_FROM_LOGS = _blocks_from_logs()


@pytest.mark.parametrize("page, name, source, body", BLOCKS_FROM_LOGS,
                         ids=[f"{p}:{n}" for p, n, _, _ in BLOCKS_FROM_LOGS])
def test_a_table_pasted_from_a_printout_quotes_only_that_printout(page, name, source, body):
    """A block that says it comes from a script's printout (``<!-- from docs/…_log.txt -->``)
    quotes it: each line of it (a table's header aside) is a line of the printout, or its figures
    are, in order, figures of one printout line (a block may pick rows and columns, or add a label
    column)."""
    log = (ROOT / source).read_text().splitlines()
    lines = [line for line in body.splitlines() if line.strip()]
    separator = [bool(re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line)) for line in lines]
    rows = [line for i, line in enumerate(lines)
            if not separator[i] and not (i + 1 < len(lines) and separator[i + 1])]
    assert rows, f"{page}, block {name}: nothing quoted"
    log_numbers = [SIGNED.findall(line) for line in log]
    for row in rows:
        if row in log:
            continue
        figures = SIGNED.findall(row)
        assert figures and any(_is_subsequence(figures, line) for line in log_numbers), \
            f"{page}, block {name}: a line that is not in {source} (regenerate it): {row}"


@pytest.mark.parametrize("script", ["docs/optimisation/target_acceptance.py", "docs/optimisation/target_dual_step.py",
                                    "docs/optimisation/lambda_stretch.py"])
def test_a_printout_is_what_its_runs_give(script):
    """The fairness target's acceptance, its dual-step comparison and the noise-free λ stretch's caps
    print, from the runs' CSVs beside them (``--tables-only``), exactly the printout the page quotes."""
    from support import script_output

    log = (ROOT / script.replace(".py", "_log.txt")).read_text()
    assert script_output(script, "--tables-only") == log


#: The figures docs/start_here.md quotes from its trade-off run, in the order of the page's
#: "about X": (epsilon, lam, column) of docs/figures/start_here_tradeoff.csv.
START_HERE_QUOTES = [("1.0", 0.0, "demographic_parity_difference"), ("1.0", 2.0, "demographic_parity_difference"),
                     ("1.0", 0.0, "test_error"), ("1.0", 2.0, "test_error"),
                     ("none", 2.0, "demographic_parity_difference"), ("none", 2.0, "test_error")]


def test_start_here_quotes_the_run_its_figure_draws():
    """`python docs/start_here.py` writes the trade-off figure, its points (a CSV) and, in the
    PNG, the CSV's SHA-256: the figure and the file are one run, and every "about X" of the page is
    that run's value to the digits quoted."""
    import hashlib

    import pandas as pd
    from PIL import Image
    from support import load_script

    script = load_script("docs/start_here.py")
    csv = DOCS / "figures" / script.TRADEOFF_CSV
    figure = DOCS / "figures" / "start_here_tradeoff.png"
    assert Image.open(figure).text.get(script.DATA_KEY) == hashlib.sha256(csv.read_bytes()).hexdigest(), (
        "docs/figures/start_here_tradeoff.png was not drawn from start_here_tradeoff.csv: run python docs/start_here.py")
    points = pd.read_csv(csv, dtype={"epsilon": str})
    quoted = re.findall(r"about (\d+\.\d+)", " ".join((DOCS / "start_here.md").read_text().split()))
    assert len(quoted) == len(START_HERE_QUOTES), quoted
    for text, (eps, lam, column) in zip(quoted, START_HERE_QUOTES):
        value = points.loc[(points["epsilon"] == eps) & (points["lam"] == lam), column].item()
        digits = len(text.split(".")[1])
        assert abs(float(text) - value) <= 0.5 * 10**-digits + 1e-9, (text, eps, lam, column, value)
