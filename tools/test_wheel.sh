#!/usr/bin/env bash
# Install the built wheel into a virtual environment as a user would (no cargo or rustc on PATH,
# no source tree on sys.path) and run the tests and `pfair train` against it. Called by make test.
#
#   tools/test_wheel.sh PYTHON VENV EXTRAS [PYTEST ARGS...]
#
# PYTHON makes VENV when VENV is missing or older than pyproject.toml (the wheel's dependencies);
# otherwise VENV is reused and only pfair is reinstalled. EXTRAS: the wheel's extras, e.g.
# "test,torch,flower". pytest runs from inside VENV (outside the source tree) on this tree's tests/.
set -euo pipefail
py=$1 venv=$2 extras=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
whl=$(ls dist/pfair-*-cp39-abi3-manylinux*.whl)

# What a user who never installed Rust has: PATH without cargo, rustc or rustup.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -e '/\.cargo/' -e '/\.rustup/' -e 'rustup' | paste -sd: -)
export PATH
if command -v cargo >/dev/null 2>&1 || command -v rustc >/dev/null 2>&1; then
    echo "[pfair] a Rust toolchain is still on PATH: $(command -v cargo rustc)" >&2
    exit 1
fi

if [ ! -f "$venv/.made" ] || [ pyproject.toml -nt "$venv/.made" ]; then
    echo "[pfair] creating $venv with $("$py" --version 2>&1) ($py)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    touch "$venv/.made"
fi
echo "[pfair] installing $whl[$extras] into $venv (no cargo or rustc on PATH)"
"$venv/bin/python" -m pip uninstall --quiet --yes pfair >/dev/null 2>&1 || true
"$venv/bin/python" -m pip install --quiet --only-binary pfair "$whl[$extras]"
"$venv/bin/python" -m pip check
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
bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider --rootdir "$root" -c "$root/pyproject.toml" "$@" "$root/tests"
bin/pfair train --dataset adult --silos 3 --heterogeneity 0 --epsilon 1 --lam 1.0
