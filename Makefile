# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo test install install-test rust-test py-test bench clean

$(VENV)/bin/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(VENV)/bin/activate
	$(PIP) install --quiet .

install-test: $(VENV)/bin/activate
	@echo "installing pfair with the test, torch and flower extras (builds the Rust extension; torch is ~5 GB)"
	$(PIP) install --quiet -e '.[test,torch,flower]'
	# opacus is used only for its pure-NumPy RDP analysis (tests/test_accounting.py loads that file);
	# --no-deps keeps its multi-GB torch dependency out of the test environment.
	$(PIP) install --quiet --no-deps 'opacus>=1.4'

## Train SteFFLe on the bundled UCI Adult data: 3 silos, epsilon = 1, demographic parity.
demo: install
	$(VENV)/bin/pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0

## Every test: the Rust unit tests and the Python test suite.
test: install-test
	cargo test --quiet
	$(PY) -m pytest -q

bench: install-test
	cargo bench
	$(PY) -m pytest benches/python --benchmark-enable -q

clean:
	rm -rf $(VENV) target
