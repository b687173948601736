"""Every code block of the README and of docs/ runs as pasted: one test per fenced block.

* ```python blocks of a page run in order in one namespace (a page builds on its earlier blocks),
  in a temporary working directory of the page's own.
* ```bash / ```console / ```sh blocks are commands; a ``pfair ...`` command runs through the CLI
  entry (:func:`pfair.cli.main`) in the page's directory, with the page's own settings (so a page
  shows only commands that are small, or marks them). Any other command (``make``, a Flower
  server, ``export``) cannot run in a test: its block must carry a marker.
* A block's output, when the page shows it (an unlabelled fenced block right after the code
  block), must be what the block prints: the page cannot drift from the code.

Markers, an HTML comment on the line right before the fence (invisible on the rendered page):

    <!-- doc-test: skip (the reason) -->   not run; the reason is required, and skips are rare
    <!-- doc-test: slow -->                run under @pytest.mark.slow (make test, not make test-fast)

A slow block makes the blocks after it on the same page slow too: they run in its namespace and
working directory. Fixtures every page's directory starts with are :data:`FIXTURES` (a small
``loans.csv`` for the pages that show "your own CSV").
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from test_docs import ROOT, _pages  # one list of the pages the docs tests read

CODE = {"python": "python", "bash": "shell", "console": "shell", "sh": "shell", "shell": "shell"}
MARKER = re.compile(r"^<!--\s*doc-test:\s*(skip|slow)\s*(?:\((.*)\))?\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")

#: Pages whose blocks the runner treats as marked, without a marker in the page (one place, with
#: the reason). None today: every page marks its own blocks.
PAGE_MARKERS: dict[str, tuple[str, str]] = {}


def _loans_csv(path: Path) -> None:
    """A small loan table of the shape the README's "your own CSV" examples name: a binary label
    ``default``, a sensitive ``sex``, a ``branch`` to split silos by, numeric and text features."""
    rng = np.random.default_rng(0)
    n = 600
    sex = rng.choice(["F", "M"], n)
    income = rng.normal(50, 15, n).round(1)
    age = rng.integers(20, 70, n)
    default = (rng.random(n) < 1 / (1 + np.exp((income - 45) / 10 + 0.3 * (sex == "M")))).astype(int)
    pd.DataFrame({"age": age, "income": income, "purpose": rng.choice(["car", "home", "study"], n),
                  "sex": sex, "branch": rng.choice(["north", "south", "east"], n),
                  "default": default}).to_csv(path, index=False)


#: Files each page's working directory holds before its first block runs.
FIXTURES = {"loans.csv": _loans_csv}


@dataclass
class Block:
    page: str
    index: int
    line: int
    kind: str  # "python" or "shell"
    code: str
    marker: str | None = None  # "skip" or "slow"
    reason: str = ""
    output: str | None = None  # the output the page shows right after the block

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def parse(page: Path, root: Path = ROOT) -> list[Block]:
    """The code blocks of ``page`` (named relative to ``root``) with their markers and shown outputs."""
    rel = str(page.relative_to(root))
    lines = page.read_text().splitlines()
    fences: list[tuple[int, int, str, str]] = []  # (start line, end line, language, text)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            fences.append((i, j, m.group(1), "\n".join(lines[i + 1:j])))
            i = j + 1
        else:
            i += 1
    blocks: list[Block] = []
    for n, (start, end, lang, text) in enumerate(fences):
        if lang not in CODE:
            continue
        block = Block(rel, len(blocks), start + 1, CODE[lang], text + "\n")
        if start > 0 and (m := MARKER.match(lines[start - 1].strip())):
            block.marker, block.reason = m.group(1), (m.group(2) or "").strip()
        if n + 1 < len(fences):
            nstart, _, nlang, ntext = fences[n + 1]
            if nlang == "" and all(not line.strip() for line in lines[end + 1:nstart]):
                block.output = ntext
        blocks.append(block)
    page_marker = PAGE_MARKERS.get(rel)
    slow = False
    for block in blocks:
        if page_marker and block.marker is None:
            block.marker, block.reason = page_marker
        slow = slow or block.marker == "slow"
        if slow and block.marker is None:
            block.marker, block.reason = "slow", "runs after a slow block of the page, in its namespace"
    return blocks


BLOCKS = [b for page in _pages() for b in parse(page)]


def _param(block: Block) -> Any:
    marks = []
    if block.marker == "skip":
        marks.append(pytest.mark.skip(reason=f"{block.id}: {block.reason}"))
    elif block.marker == "slow":
        marks.append(pytest.mark.slow)
    return pytest.param(block, id=block.id, marks=marks)


def shell_commands(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and prompts dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        if words:
            commands.append(shlex.join(words))
    return commands


@dataclass
class PageRun:
    """One page's namespace, working directory and the blocks that ran (or failed)."""

    workdir: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__doc_page__"})
    done: dict[int, bool | str] = field(default_factory=dict)
    #: scikit-learn's global configuration as the page left it (a page may enable metadata
    #: routing); applied while its blocks run, never leaked to other tests.
    sklearn_config: dict[str, Any] | None = None


_RUNS: dict[str, PageRun] = {}


@pytest.fixture
def page_run(tmp_path_factory: pytest.TempPathFactory):
    def get(page: str) -> PageRun:
        if page not in _RUNS:
            workdir = tmp_path_factory.mktemp(re.sub(r"\W", "_", page))
            for name, make in FIXTURES.items():
                make(workdir / name)
            _RUNS[page] = PageRun(workdir)
        return _RUNS[page]

    return get


def execute(block: Block, run: PageRun) -> str:
    """Run ``block`` in the page's directory (and namespace); return what it printed."""
    import sklearn

    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(run.workdir)
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings(), \
                sklearn.config_context(**(run.sklearn_config or {})):
            warnings.simplefilter("ignore")  # the pages' own warnings are what they say they are
            if block.kind == "python":
                exec(compile(block.code, f"{block.id}", "exec"), run.namespace)
            else:
                from pfair.cli import main

                for command in shell_commands(block.code):
                    argv = shlex.split(command)
                    if argv[1:2] == ["deploy"]:
                        argv += ["--timeout", "600"]  # a deployment in a test is bounded in time
                    assert argv[0] == "pfair", (
                        f"{block.id}: {command!r} is not a pfair command; mark the block "
                        "<!-- doc-test: skip (reason) --> if it cannot run in a test")
                    code = main(argv[1:])
                    assert code in (0, None), f"{block.id}: {command!r} exited with {code}"
            run.sklearn_config = sklearn.get_config()
    finally:
        os.chdir(cwd)
    return out.getvalue()


def ends_in_print(code: str) -> bool:
    """Whether the last statement of ``code`` is a call of ``print``: a reader then expects output."""
    import ast

    body = ast.parse(code).body
    last = body[-1] if body else None
    return (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Name) and last.value.func.id == "print")


def _same_output(shown: str, printed: str) -> bool:
    norm = lambda text: [line.rstrip() for line in text.strip().splitlines()]  # noqa: E731
    return norm(shown) == norm(printed)


#: The extras a page's block may import, by the module it imports: a block that needs one that is
#: not installed (make test's environments on other Pythons have neither) is skipped, not failed.
EXTRA_MODULES = {"torch": "torch", "torchvision": "torch", "flwr": "flower"}


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose module ``exc`` did not find, when that module is not installed."""
    import importlib.util

    name = (exc.name or "").split(".")[0]
    return EXTRA_MODULES.get(name) if name and importlib.util.find_spec(name) is None else None


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_doc_block_runs(block: Block, page_run) -> None:
    run = page_run(block.page)
    for earlier in BLOCKS:  # the page's earlier blocks first, when this one is run alone
        if earlier.page == block.page and earlier.index < block.index and earlier.marker != "skip":
            if earlier.index not in run.done:
                try:
                    execute(earlier, run)
                    run.done[earlier.index] = True
                except ModuleNotFoundError as exc:
                    run.done[earlier.index] = _missing_extra(exc) or False
                except BaseException:
                    run.done[earlier.index] = False
            if isinstance(run.done[earlier.index], str):
                pytest.skip(f"an earlier block of {block.page} (line {earlier.line}) needs the "
                            f"{run.done[earlier.index]} extra, which is not installed")
            if not run.done[earlier.index]:
                pytest.fail(f"an earlier block of {block.page} (line {earlier.line}) failed")
    run.done[block.index] = False
    try:
        printed = execute(block, run)
    except ModuleNotFoundError as exc:
        if (extra := _missing_extra(exc)) is None:
            raise
        run.done[block.index] = extra
        pytest.skip(f"{block.id} needs the {extra} extra, which is not installed (pip install 'pfair[{extra}]')")
    run.done[block.index] = True
    check_printed(block, printed)


def check_printed(block: Block, printed: str) -> None:
    """What a python block printed is the output the page shows after it, if any, and not empty
    when the block ends in print()."""
    if block.kind != "python":
        return
    if block.output is not None:
        assert _same_output(block.output, printed), (
            f"{block.id}: the page shows\n{block.output}\nbut the block prints\n{printed}")
    if ends_in_print(block.code):
        assert printed.strip(), f"{block.id}: the block ends in print() but prints nothing"


def test_markers_carry_a_reason_and_skips_are_rare() -> None:
    skips = [b for b in BLOCKS if b.marker == "skip"]
    assert all(b.reason for b in skips), [b.id for b in skips if not b.reason]
    assert len(skips) <= len(BLOCKS) // 3, [b.id for b in skips]
    for page in _pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if "doc-test" in line and line.lstrip().startswith("<!--"):
                assert MARKER.match(line.strip()), f"{page.name}:{n}: malformed marker {line!r}"


#: A skip reason naming the block that runs the same command: "the same command as PAGE's first block".
SAME_AS = re.compile(r"the same command as (\S+?)'s first block")


def test_a_block_skipped_as_a_duplicate_is_the_block_it_names() -> None:
    """A block skipped because another page runs "the same command" (the README's Flower block,
    docs/deploy.md's first) stays that command: a change to one fails until the other follows."""
    duplicates = [(b, SAME_AS.search(b.reason)) for b in BLOCKS if b.marker == "skip"]
    duplicates = [(b, m.group(1)) for b, m in duplicates if m]
    assert any(b.page == "README.md" for b, _ in duplicates)
    for block, page in duplicates:
        first = next(b for b in BLOCKS if b.page == page)
        assert first.marker != "skip", f"{block.id}: {first.id}, which it names, does not run"
        assert shell_commands(block.code) == shell_commands(first.code), (block.id, first.id)


def test_the_runner_reads_markers_outputs_and_commands(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- doc-test: skip (needs a server) -->\n```bash\nflower-superlink \\\n  --port 1\n```\n"
                    "```python\nprint(1)\n```\n\n```\n1\n```\n<!-- doc-test: slow -->\n```python\nx = 1\n```\n"
                    "```python\ny = 2\n```\n")
    blocks = parse(page, tmp_path)
    assert [b.kind for b in blocks] == ["shell", "python", "python", "python"]
    assert (blocks[0].marker, blocks[0].reason) == ("skip", "needs a server")
    assert shell_commands(blocks[0].code) == ["flower-superlink --port 1"]
    assert blocks[1].output == "1" and blocks[1].marker is None
    assert blocks[2].marker == "slow" and blocks[3].marker == "slow"  # after a slow block: slow
    assert ends_in_print(blocks[1].code) and not ends_in_print(blocks[2].code)
    assert not ends_in_print("for i in range(2):\n    print(i)\n") and ends_in_print("x = 1\nprint(x, end='')\n")
    check_printed(blocks[1], "1\n")
    for printed in ("", "\n"):  # a block that ends in print() and prints nothing fails
        with pytest.raises(AssertionError, match="prints nothing"):
            check_printed(Block("page.md", 0, 1, "python", "x = ''\nprint(x)\n"), printed)


# --------------------------------------------------------------------------------------------
# Numbers a page shows come from its script, at today's defaults
# --------------------------------------------------------------------------------------------


def _tradeoff_script() -> Any:
    from support import load_script

    return load_script("examples/adult_tradeoff.py")


TRADEOFF_TABLES = [["--seeds", "3", "--epsilons", "none", "1", "3"],
                   ["--seeds", "3", "--epsilons", "1", "3", "--batch-size", "256"]]


@pytest.mark.parametrize("argv", TRADEOFF_TABLES, ids=["defaults", "batch256"])
def test_results_page_states_the_configuration_adult_tradeoff_runs(argv: list[str]) -> None:
    script = _tradeoff_script()
    page = (ROOT / "docs" / "results.md").read_text()
    args = script.parse(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        line = script.config_line(args)
    assert line in page, f"docs/results.md does not state what examples/adult_tradeoff.py runs: {line}"
    assert f"python examples/adult_tradeoff.py {' '.join(argv)}" in page


def _table_after(page: str, command: str) -> list[str]:
    """The rows (header and rule included) of the first Markdown table after ``command`` on ``page``."""
    lines = page[page.index(command):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


@pytest.mark.slow
@pytest.mark.parametrize("argv", TRADEOFF_TABLES, ids=["defaults", "batch256"])
def test_each_adult_results_table_is_what_adult_tradeoff_prints(argv: list[str]) -> None:
    """Every row of the table docs/results.md shows under the command, rerun (75 seeded fits for
    both tables). Seeded (noise_seed = seed): the same platform prints the same digits; the last
    printed digit may differ."""
    script = _tradeoff_script()
    shown = _table_after((ROOT / "docs" / "results.md").read_text(), f"python examples/adult_tradeoff.py {' '.join(argv)}")
    printed = script.table(script.parse(argv))
    assert shown[:2] == printed[:2] and len(shown) == len(printed), (shown, printed)
    for page_row, row in zip(shown[2:], printed[2:]):
        cells = lambda line: line.strip("|").split("|")  # noqa: E731
        assert cells(page_row)[:2] == cells(row)[:2], (page_row, row)  # the same ε and λ, in the same order
        numbers = lambda line: [float(v) for v in re.findall(r"\d+\.\d+", " ".join(cells(line)[2:]))]  # noqa: E731
        assert np.allclose(numbers(page_row), numbers(row), atol=2e-4, rtol=0), (page_row, row)
