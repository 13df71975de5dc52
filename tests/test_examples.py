"""The examples run as written: each is a subprocess of this interpreter, from the repository root."""

import math
import os
from pathlib import Path
import re
import subprocess
import sys

import pytest

import qfx

from . import reference, reference_mixed

ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str, *args: str, out: Path | None = None) -> str:
    # -W error: the examples must run without warnings, like the test suite. `out`: where the examples
    # that save a drawing of their circuit put it (QFX_EXAMPLES_OUT), so that nothing lands in the checkout.
    env = os.environ.copy()
    if out is not None:
        env["QFX_EXAMPLES_OUT"] = str(out)
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quickstart(tmp_path):
    out = run_example("quickstart.py", out=tmp_path)
    assert "depth: 3" in out  # H then CNOT then RY on wire 0
    for label in ("Circuit:", "<H> =", "jax.grad(qfx.expval)", "vmapped batch", "samples", "jitted Adam"):
        assert label in out
    # The circuit and observable of the quickstart, evaluated by the dense NumPy reference simulator.
    circ = qfx.Circuit([qfx.H(0), qfx.RX(0.4, wires=1), qfx.CNOT(wires=(0, 1)), qfx.RY(0.7, wires=0)])
    H = 0.5 * qfx.Z(0) @ qfx.Z(1) - 0.2 * qfx.X(0)
    printed = float(re.search(r"^<H> = ([-+0-9.]+)$", out, re.MULTILINE).group(1))
    assert abs(printed - reference.expval(circ, H)) < 1e-5


def test_vqe_optax_reaches_chemical_accuracy(tmp_path):
    out = run_example("vqe_optax.py", out=tmp_path)
    assert _is_png(tmp_path / "vqe_optax_circuit.png")
    exact = float(re.search(r"Exact ground energy \(np.linalg.eigh\): ([-0-9.]+) Ha", out).group(1))
    assert abs(exact - (-1.13728)) < 1e-4  # the FCI energy of H2 / STO-3G at 0.7414 angstrom
    error = float(re.search(r"^final error: ([0-9.eE+-]+) Ha$", out, re.MULTILINE).group(1))
    assert error < 1.6e-3


def test_torch_hybrid_classifier_learns(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    png = tmp_path / "torch_hybrid.png"
    # A few epochs (the default is 30): enough to separate the two moons well above chance.
    out = run_example("torch_hybrid.py", "--epochs", "5", "--out", str(png))
    accuracy = float(re.search(r"^test accuracy: +([0-9.]+)$", out, re.MULTILINE).group(1))
    assert accuracy > 0.8, out  # chance is about 0.5: the two classes are drawn with equal probability
    assert _is_png(png) and _is_png(tmp_path / "torch_hybrid_circuit.png")


def test_mid_circuit_statistics_match_theory():
    out = run_example("mid_circuit.py")

    def values(label):
        line = next(line for line in out.splitlines() if line.startswith(label))
        return [float(x) for x in re.findall(r"-?\d+\.\d+", line.split(":", 1)[1])]

    assert abs(values("teleportation fidelity (exact)")[0] - 1) < 1e-5
    assert abs(values("teleportation fidelity (sampled")[0] - 1) < 1e-5
    exact, theory = values("RUS success probability (exact)")
    assert abs(exact - theory) < 1e-5 and abs(theory - (1 - math.sin(1.0) ** 8)) < 1e-6
    mean, sigma, theory = values("RUS success probability (sampled")
    assert abs(mean - theory) < 5 * sigma
    for label in ("<X> on the target (exact)", "d<X>/d(prep angle)"):
        value, theory = values(label)
        assert abs(value - theory) < 1e-5


def test_from_qasm_trains_and_writes_back():
    out = run_example("from_qasm.py")
    exact = float(re.search(r"exact ground energy \(numpy eigvalsh\): ([-0-9.]+)", out).group(1))
    # H = Z0 Z1 + 0.5 X1 + 0.2 Z0 splits on wire 0's Z value z: z (0.2 + Z1) + 0.5 X1 has lowest
    # eigenvalue -0.2 - sqrt(1 + 0.25) at z = -1.
    assert abs(exact - (-0.2 - math.sqrt(1.25))) < 1e-6
    final = float(re.search(r"^final energy: ([-0-9.]+)$", out, re.MULTILINE).group(1))
    assert abs(final - exact) < 1e-4
    # The program it writes is the trained circuit: it has the trained energy.
    written = out.split("trained circuit as OpenQASM 3:\n", 1)[1]
    H = qfx.Z(0) @ qfx.Z(1) + 0.5 * qfx.X(1) + 0.2 * qfx.Z(0)
    assert abs(float(qfx.expval(qfx.from_qasm(written), H)) - final) < 1e-5


def test_noise_fit_recovers_the_strengths():
    out = run_example("noise_fit.py")
    for label, true in (("depolarizing p", 0.04), ("amplitude damping gamma", 0.10)):
        match = re.search(rf"^{label}: fitted ([0-9.]+), true ([0-9.]+)$", out, re.MULTILINE)
        fitted, printed_true = float(match.group(1)), float(match.group(2))
        assert printed_true == true
        assert abs(fitted - true) < 0.15 * true


def test_zne_extrapolates_towards_the_noiseless_value():
    out = run_example("zne.py")

    def number(label):
        return float(re.search(rf"^{label}: ([-+0-9.]+)$", out, re.MULTILINE).group(1))

    circuit = qfx.Circuit(
        [
            qfx.RY(0.9, wires=0),
            qfx.CNOT(wires=(0, 1)),
            qfx.RX(0.4, wires=2),
            qfx.CNOT(wires=(1, 2)),
            qfx.RY(-0.3, wires=1),
            qfx.H(2),
        ]
    )
    obs = qfx.Z(0) @ qfx.Z(1) + qfx.X(2)
    noiseless = reference.expval(circuit, obs)
    model = qfx.NoiseModel(
        [
            qfx.AfterGates(qfx.DepolarizingChannel(0.02, wires=0)),
            qfx.AfterGates(qfx.AmplitudeDamping(0.01, wires=0)),
        ]
    )
    assert abs(number("noiseless \\(state vector\\)") - noiseless) < 1e-5
    assert abs(number("noise x1") - reference_mixed.expval(model(circuit), obs)) < 1e-5
    assert abs(number("extrapolated to zero noise") - noiseless) < 0.2 * abs(number("noise x1") - noiseless)
