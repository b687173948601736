# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo test test-fast install install-test rust-test bench clean

$(VENV)/bin/activate:
	@echo "[pfair] creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# pip is --quiet, so say what it is doing: the first install compiles the Rust core (release
# build of rust/ through maturin), which is silent for several minutes.
install: $(VENV)/bin/activate
	@command -v cargo >/dev/null 2>&1 || echo "[pfair] warning: cargo not found; pip needs a Rust toolchain (https://rustup.rs) to build pfair"
	@echo "[pfair] installing pfair into $(VENV): builds the Rust extension in release mode;"
	@echo "[pfair] the first time this takes about 5 minutes on 2 cores with no output (later runs reuse the build and are faster)"
	@start=$$(date +%s); $(PIP) install --quiet . && echo "[pfair] installed in $$(( $$(date +%s) - start )) s: $$($(VENV)/bin/pfair --version)"

install-test: $(VENV)/bin/activate
	@echo "[pfair] installing pfair with the test, torch and flower extras: builds the Rust extension (~5 min"
	@echo "[pfair] the first time, silent) and downloads torch (~5 GB); expect 10-20 minutes on a fresh machine"
	$(PIP) install --quiet -e '.[test,torch,flower]'
	# opacus is used only for its pure-NumPy RDP analysis (tests/test_accounting.py loads that file);
	# --no-deps keeps its multi-GB torch dependency out of the test environment.
	$(PIP) install --quiet --no-deps 'opacus>=1.4'

## Train SteFFLe on the bundled UCI Adult data: 3 silos, epsilon = 1, demographic parity.
demo: install
	@echo "[pfair] demo: SteFFLe on UCI Adult (45,222 records, sensitive attribute sex), 3 silos, epsilon = 1, SteFFLe's default epochs and batch (a few seconds)"
	$(VENV)/bin/pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0
	@echo "[pfair] next: docs/start_here.md (your own CSV), or $(VENV)/bin/pfair train --help"

## Every test: the Rust unit tests and the Python test suite.
test: install-test
	cargo test --quiet
	$(PY) -m pytest -q -n 2 --dist loadfile

## A developer's inner loop: the Python tests not marked slow (under 2 minutes on 2 cores, see
## docs/dev/performance-notebook.md, "The test suite"); make test still runs every test. It uses
## the environment as it is (no pip install each call): run make install-test once first, and again
## after changing Rust (python/pfair is installed in editable mode, so Python changes need nothing).
## The Rust tests are not in it (a Rust change recompiles them for minutes): make rust-test.
test-fast:
	@$(PY) -c "import pfair, xdist" 2>/dev/null || { echo "[pfair] $(VENV) has no pfair with the test extras: run make install-test first"; exit 1; }
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

## The Rust unit tests alone.
rust-test:
	cargo test --quiet

bench: install-test
	cargo bench
	$(PY) -m pytest benches/python --benchmark-enable -q

clean:
	rm -rf $(VENV) target
