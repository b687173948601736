#!/usr/bin/env bash
# Install the built wheel into a virtual environment as a user would (no cargo or rustc on PATH,
# no source tree on sys.path) and run the tests and `pfair train` against it. Called by make test.
#
#   [CONSTRAINTS=FILE] [TEST_TOOLS_WITHOUT="NAME ..."] [TESTS="tests/a.py ..."] \
#   tools/test_wheel.sh PYTHON VENV EXTRAS [PYTEST ARGS...]
#
# PYTHON makes VENV when VENV is missing or older than pyproject.toml or CONSTRAINTS (the wheel's
# dependencies); otherwise VENV is reused and only pfair is reinstalled. EXTRAS: the wheel's
# extras, e.g. "test,torch,flower". pytest runs from inside VENV (outside the source tree) on this
# tree's tests/, or on the files TESTS names (paths from the tree's root).
# CONSTRAINTS: a pip constraints file (e.g. ci/lowest.txt) that holds pfair's dependencies at the
# versions it names: the lower ends of pyproject.toml's ranges (make test-lowest). Without it pip
# resolves the newest versions the ranges allow.
# TEST_TOOLS_WITHOUT: install the test extra's tools (pyproject.toml) except these names, for an
# environment below a test tool's own floor (fairlearn needs numpy >= 1.24.4 and pandas >= 2.0.3);
# put "test" in EXTRAS or use this, not both.
set -euo pipefail
py=$1 venv=$2 extras=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
constraints=()
[ -n "${CONSTRAINTS:-}" ] && constraints=(-c "$root/$CONSTRAINTS")
tests=()
for t in ${TESTS:-tests}; do tests+=("$root/$t"); done
whl=$(ls dist/pfair-*-cp39-abi3-manylinux*.whl)

# What a user who never installed Rust has: PATH without cargo, rustc or rustup.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -e '/\.cargo/' -e '/\.rustup/' -e 'rustup' | paste -sd: -)
export PATH
if command -v cargo >/dev/null 2>&1 || command -v rustc >/dev/null 2>&1; then
    echo "[pfair] a Rust toolchain is still on PATH: $(command -v cargo rustc)" >&2
    exit 1
fi

if [ ! -f "$venv/.made" ] || [ pyproject.toml -nt "$venv/.made" ] \
    || { [ -n "${CONSTRAINTS:-}" ] && [ "$CONSTRAINTS" -nt "$venv/.made" ]; }; then
    echo "[pfair] creating $venv with $("$py" --version 2>&1) ($py)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    touch "$venv/.made"
fi
tools=()
if [ -n "${TEST_TOOLS_WITHOUT:-}" ]; then
    # The test extra's requirements, less the named tools.
    mapfile -t tools < <("$venv/bin/python" - "$TEST_TOOLS_WITHOUT" <<'PY'
import re, sys, tomllib
drop = set(sys.argv[1].split())
for req in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]:
    if re.match(r"[A-Za-z0-9_.-]+", req).group(0) not in drop:
        print(req)
PY
)
fi
echo "[pfair] installing $whl[$extras] ${tools[*]} into $venv${CONSTRAINTS:+ under $CONSTRAINTS} (no cargo or rustc on PATH)"
start=$(date +%s)
# opacus too: installed without its dependencies below, it would fail pip check in a reused VENV.
"$venv/bin/python" -m pip uninstall --quiet --yes pfair opacus >/dev/null 2>&1 || true
"$venv/bin/python" -m pip install --quiet --only-binary pfair "${constraints[@]}" "$whl[$extras]" "${tools[@]}"
"$venv/bin/python" -m pip check
echo "[pfair] installed in $(( $(date +%s) - start )) s: $("$venv/bin/python" -m pip list 2>/dev/null \
    | grep -iE '^(numpy|pandas|scipy|scikit-learn|matplotlib|torch|flwr|pyarrow|pillow|tqdm) ' | tr -s ' ' | paste -sd, -)"
# opacus is used only for its pure-NumPy RDP analysis (tests/test_accounting.py loads that file);
# --no-deps keeps its multi-GB torch dependency out (and so after pip check).
"$venv/bin/python" -m pip install --quiet --no-deps 'opacus>=1.4'

cd "$venv"
bin/python - <<'PY'
import sys
import pfair, pfair._core as core
assert "site-packages" in pfair.__file__ and core.__file__.endswith(".abi3.so"), (pfair.__file__, core.__file__)
print(f"[pfair] CPython {sys.version.split()[0]}: testing {pfair.__file__} with {core.__file__.rsplit('/', 1)[-1]}")
PY
bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider --rootdir "$root" -c "$root/pyproject.toml" "$@" "${tests[@]}"
bin/pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0
