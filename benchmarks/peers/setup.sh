#!/usr/bin/env bash
# Create benchmarks/peers/.venv with the peer libraries (PennyLane + lightning, TensorCircuit-NG, qujax).
# qfx is NOT installed here: the harness runs qfx in the interpreter that runs run.py (the project's venv),
# so the peers' pins can never change qfx's JAX, and nothing here touches qfx's dependencies or CI.
#
# Usage: bash benchmarks/peers/setup.sh            # create (or update) the venv
#        PYTHON=python3.12 bash benchmarks/peers/setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
venv="$here/.venv"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# Unpinned: whatever versions coexist today. The installed versions are printed below and recorded in
# every results JSON file by run.py.
"$venv/bin/python" -m pip install --quiet pennylane pennylane-lightning tensorcircuit-ng qujax jax
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
for name in ("pennylane", "pennylane-lightning", "tensorcircuit-ng", "qujax", "jax", "jaxlib", "numpy"):
    try:
        print(f"{name} {version(name)}")
    except Exception as e:  # noqa: BLE001
        print(f"{name} MISSING ({e})")
PY
