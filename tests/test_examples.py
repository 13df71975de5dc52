"""The examples run as written: each is a subprocess of this interpreter, from the repository root."""

import os
from pathlib import Path
import re
import subprocess
import sys

import qfx

from . import reference

ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str) -> str:
    # -W error: the examples must run without warnings, like the test suite.
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "examples" / name)],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_quickstart():
    out = run_example("quickstart.py")
    for label in ("Circuit:", "<H> =", "jax.grad(qfx.expval)", "vmapped batch", "samples", "jitted Adam"):
        assert label in out
    # The circuit and observable of the quickstart, evaluated by the dense NumPy reference simulator.
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.4, wires=1), qfx.CNOT(wires=(0, 1)), qfx.RY(0.7, wires=0)])
    H = 0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)
    printed = float(re.search(r"^<H> = ([-+0-9.]+)$", out, re.MULTILINE).group(1))
    assert abs(printed - reference.expval(circ, H)) < 1e-5


def test_vqe_optax_reaches_chemical_accuracy():
    out = run_example("vqe_optax.py")
    exact = float(re.search(r"Exact ground energy \(np.linalg.eigh\): ([-0-9.]+) Ha", out).group(1))
    assert abs(exact - (-1.13728)) < 1e-4  # the FCI energy of H2 / STO-3G at 0.7414 angstrom
    error = float(re.search(r"^final error: ([0-9.eE+-]+) Ha$", out, re.MULTILINE).group(1))
    assert error < 1.6e-3
