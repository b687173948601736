"""docs/start_here.md runs as written: every python block in order (shorter training), the
command-line block, and the figures it shows exist."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _page_module():
    from support import load_script

    return load_script("docs/start_here.py")


def _short(code: str) -> str:
    """The default epochs on Adult are a second or more per fit; 3 are enough to check that the
    page runs. The page spells the default out (tests/test_defaults.py checks it is the default)."""
    from pfair.settings import SteFFLeSettings

    epochs = f"epochs={SteFFLeSettings().epochs}"
    assert epochs in code or "SteFFLe(" not in code, f"every fit on the page sets {epochs}"
    return code.replace(epochs, "epochs=3")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("start_here")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns = _page_module().run_page(workdir, edit=_short)
    return workdir, ns


def test_every_python_block_runs_and_leaves_what_the_page_describes(page):
    workdir, ns = page
    blocks = _page_module().python_blocks()
    assert len(blocks) >= 8
    ds, fed, model = ns["ds"], ns["fed"], ns["model"]
    assert (workdir / "adult.csv").exists() and ds.name == "adult" and ds.n_train + ds.n_test == 45_222
    assert "source" in ds.attrs_train.columns and not any(f.startswith("source") for f in ds.feature_names)
    # The output the page shows for print(ds.group_names, ds.label_names) is what it prints.
    assert f"{list(ds.group_names)} {list(ds.label_names)}" in (DOCS / "start_here.md").read_text()
    # h = 0.75 by age: silo means of age increase, unlike the uniform split.
    ages = fed.describe()["mean(age)"].to_numpy()
    assert ages[0] < ages[1] < ages[2] and ages[2] - ages[0] > 10
    uniform_ages = ns["uniform"].describe()["mean(age)"].to_numpy()
    assert uniform_ages.max() - uniform_ages.min() < 2
    assert model.privacy_report_["epsilon_spent"].max() <= 1.0
    assert len(ns["tradeoff"]) == 12 and set(ns["tradeoff"]["lam"]) == {0.0, 0.5, 1.0, 2.0}
    # The ledgers were written, and the second fit shared the first one's budget.
    for j in range(3):
        assert (workdir / "ledgers" / f"silo{j}.json").exists()
    assert "spent" in str(ns["caught"][0].message)
    assert ns["again"].privacy_report_["epsilon_spent"].max() <= 1.0


def test_the_missing_value_refusal_the_page_shows_is_the_one_load_csv_raises(page):
    from pfair.datasets import load_csv

    workdir, _ = page
    with pytest.raises(ValueError) as refusal:
        load_csv(workdir / "adult.csv", label="income", positive_label=">50K", sensitive="sex", keep=["source"])
    assert str(refusal.value) in (DOCS / "start_here.md").read_text()


def test_the_shell_block_runs(page, capsys):
    from pfair.cli import main

    workdir, _ = page
    commands = _page_module().shell_commands()
    assert commands and all(c.startswith("pfair ") for c in commands)
    import os

    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for command in commands:
            argv = shlex.split(command)[1:]
            if argv[0] == "train":
                argv += ["--epochs", "3", "--json"]
            assert main(argv) == 0, command
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "shuffle" in out and "covered" in out


def test_the_figures_the_page_shows_exist_and_readme_links_the_page_first():
    text = (DOCS / "start_here.md").read_text()
    figures = re.findall(r"\]\((figures/[^)]+\.png)\)", text)
    assert len(figures) == 2
    for figure in figures:
        assert (DOCS / figure).stat().st_size > 10_000
    readme = (DOCS.parent / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and links[0] == "docs/start_here.md"
