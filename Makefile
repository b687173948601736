# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# make wheel's tools (maturin, and zig from PyPI's ziglang to link against an old glibc).
BUILD_VENV ?= .venv-build
# make test's environment: the built wheel installed as a user installs it (no source tree, no
# Rust toolchain on PATH). Made anew whenever pyproject.toml (the wheel's dependencies) changes.
WHEEL_VENV ?= .venv-wheel
# Other CPythons make test runs the fast tests on, with the same wheel, when the machine has them
# (python3.X on PATH, or a pyenv version): the abi3 floor and the newest.
EXTRA_PYTHONS ?= 3.9 3.13
DIST   ?= dist
# The one wheel: abi3 (CPython >= 3.9) and manylinux2014 (glibc >= 2.17, checked by maturin's own
# auditwheel pass, which fails the build on a symbol newer than the policy).
WHEEL_GLOB := $(DIST)/pfair-*-cp39-abi3-manylinux*.whl
# pip keeps no copy of what it downloads: make test installs PyPI's torch twice (the newest in
# $(VENV), 2.3 in make test-lowest's environment), and a cache would hold about 5 GB more of
# wheels that each environment, made once, never reads again. A CI machine ran out of disk with it.
export PIP_NO_CACHE_DIR := 1

.PHONY: demo test test-fast install install-test rust-test bench clean wheel test-wheel test-wheel-extra-pythons test-as-user test-lowest

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
	# An extension left in python/pfair by an editable build from before abi3
	# (_core.cpython-311-*.so) would be imported before the new _core.abi3.so: remove it first.
	rm -f python/pfair/_core.*.so
	# --upgrade (eager): the newest releases the ranges allow, also in a .venv made before they came
	# out, so that make test runs the upper ends (make test-lowest runs the lower ones).
	$(PIP) install --quiet --upgrade --upgrade-strategy eager -e '.[test,torch,flower]'
	# opacus is used only for its pure-NumPy RDP analysis (tests/test_accounting.py loads that file);
	# --no-deps keeps its multi-GB torch dependency out of the test environment.
	$(PIP) install --quiet --no-deps 'opacus>=1.4'

## Train SteFFLe on the bundled UCI Adult data: 3 silos, epsilon = 1, demographic parity.
demo: install
	@echo "[pfair] demo: SteFFLe on UCI Adult (45,222 records, sensitive attribute sex), 3 silos, epsilon = 1, SteFFLe's default epochs and batch (a few seconds)"
	$(VENV)/bin/pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0
	@echo "[pfair] next: docs/start_here.md (your own CSV), or $(VENV)/bin/pfair train --help"

## The wheel for users (dist/): one abi3 manylinux wheel for every CPython >= 3.9, and the sdist
## beside it. maturin builds the wheel from the unpacked sdist, so the sdist is checked to build
## from scratch on every make wheel.
$(BUILD_VENV)/bin/maturin:
	@echo "[pfair] creating $(BUILD_VENV) with maturin and ziglang (the linker for an old glibc floor)"
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BUILD_VENV)/bin/python -m pip install --quiet 'maturin>=1.5,<2' 'ziglang>=0.13' 'auditwheel>=6'

wheel: $(BUILD_VENV)/bin/maturin
	@command -v cargo >/dev/null 2>&1 || { echo "[pfair] make wheel needs a Rust toolchain (https://rustup.rs); users of the wheel do not"; exit 1; }
	@echo "[pfair] building the sdist and, from it, the abi3 manylinux wheel (release build of rust/, about 2-5 minutes on 2 cores the first time)"
	rm -f $(DIST)/pfair-*.whl $(DIST)/pfair-*.tar.gz
	@# maturin builds from the unpacked sdist, whose files all carry one old fixed mtime: cargo would
	@# judge an earlier build of pfair-core in a reused target directory fresh and ship it after a Rust
	@# change. Forget that crate's fingerprints (its dependencies stay built).
	rm -rf "$${CARGO_TARGET_DIR:-$(CURDIR)/target}"/*/release/.fingerprint/pfair-core-*
	@start=$$(date +%s); PATH="$(CURDIR)/$(BUILD_VENV)/bin:$$PATH" CARGO_TARGET_DIR="$${CARGO_TARGET_DIR:-$(CURDIR)/target}" $(BUILD_VENV)/bin/maturin build --quiet --release \
		--sdist --zig --compatibility manylinux2014 --out $(DIST) && echo "[pfair] built in $$(( $$(date +%s) - start )) s:" && ls $(DIST)
	$(BUILD_VENV)/bin/auditwheel show $(WHEEL_GLOB)

## Every test: the Rust unit tests and the Python test suite (in .venv, with the torch and flower
## extras at the newest versions their ranges allow: the upper ends), then the wheel (make wheel)
## installed as a user installs it, with the test and plot extras and no Rust on PATH, and the tests
## not marked slow and `pfair train` run against it (about 6 more minutes on 2 cores; the torch and
## flower tests skip there and ran in .venv), then the lower ends of the ranges (make test-lowest).
test: install-test
	cargo test --quiet
	$(PY) -m pytest -q -n 2 --dist loadfile
	$(MAKE) wheel
	tools/test_wheel.sh $(PYTHON) $(WHEEL_VENV)-fast test,plot -m "not slow"
	$(MAKE) test-lowest

## The lower ends of pyproject.toml's version ranges, from the built wheel, each in its own virtual
## environment (made once, and anew when pyproject.toml or the constraints file changes):
## - ci/lowest-core.txt: the core dependencies and matplotlib at their floors (numpy 1.23, pandas
##   1.5, scipy 1.9, ...), with the tests not marked slow. fairlearn (a test tool, not a pfair
##   dependency) needs numpy >= 1.24.4 and pandas >= 2.0.3, so it is left out there and so are the
##   tests that import it (tests/test_metrics.py's cross-checks, and docs/start_here.md, which
##   compares with fairlearn's metrics: its blocks and tests/test_start_here.py); they run in the
##   other environments;
## - ci/lowest.txt: flwr 1.41.0 and torch 2.3.0 with the rest at the lowest versions those allow
##   (flwr 1.41 needs numpy >= 1.26), with every torch and Flower test file (slow ones included),
##   then the other tests not marked slow.
## Needs make wheel first. About 15 minutes on 2 cores for new environments (torch 2.3 from PyPI,
## the CUDA build, is about 2.5 GB; see docs/dev/performance-notebook.md, "The lowest versions").
LOWEST_DEEP_TESTS := tests/test_torch.py tests/test_torch_cuda.py tests/test_flower.py \
	tests/test_flower_faults.py tests/test_flower_node.py tests/test_flower_silo_host.py \
	tests/test_flower_thresholds.py tests/test_flower_tune.py tests/test_deploy_plan.py
test-lowest:
	CONSTRAINTS=ci/lowest-core.txt TEST_TOOLS_WITHOUT=fairlearn \
		tools/test_wheel.sh $(PYTHON) $(WHEEL_VENV)-lowest-core plot -m "not slow" \
		--ignore=$(CURDIR)/tests/test_metrics.py --ignore=$(CURDIR)/tests/test_start_here.py -k 'not (test_doc_block_runs and start_here)'
	CONSTRAINTS=ci/lowest.txt TESTS="$(LOWEST_DEEP_TESTS)" \
		tools/test_wheel.sh $(PYTHON) $(WHEEL_VENV)-lowest test,plot,torch,flower
	CONSTRAINTS=ci/lowest.txt tools/test_wheel.sh $(PYTHON) $(WHEEL_VENV)-lowest test,plot,torch,flower \
		-m "not slow" $(foreach t,$(LOWEST_DEEP_TESTS),--ignore=$(CURDIR)/$(t))

## Every test against the wheel as a user installs it, with every extra, and the fast tests on the
## other CPythons the machine has (not part of make test: about 25 more minutes on a loaded 2-core
## machine, for a new environment with torch and the other CPythons).
test-as-user: rust-test wheel test-wheel test-wheel-extra-pythons

# The wheel into $(WHEEL_VENV) with the test, torch and flower extras, with no Rust toolchain on
# PATH; pytest runs from outside the source tree, so `import pfair` is the installed package (the
# script checks it), then `pfair train` (tools/test_wheel.sh).
test-wheel:
	tools/test_wheel.sh $(PYTHON) $(WHEEL_VENV) test,torch,flower

# The fast tests (not marked slow) on the other CPythons this machine has (python3.X on PATH, or a
# pyenv version), from the same wheel, with the test and plot extras (torch and flower have their
# own Python floors; their tests skip).
test-wheel-extra-pythons:
	@for v in $(EXTRA_PYTHONS); do \
		py=$$(command -v python$$v 2>/dev/null || true); \
		{ [ -n "$$py" ] && "$$py" -c '' 2>/dev/null; } || py=$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python$$v 2>/dev/null | tail -n 1); \
		if [ -z "$$py" ] || ! "$$py" -c '' 2>/dev/null; then echo "[pfair] no CPython $$v on this machine: not tested"; continue; fi; \
		tools/test_wheel.sh "$$py" $(WHEEL_VENV)-$$v test,plot -m "not slow" || exit 1; \
	done

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
	rm -rf $(VENV) $(BUILD_VENV) $(WHEEL_VENV) $(WHEEL_VENV)-* target $(DIST)
