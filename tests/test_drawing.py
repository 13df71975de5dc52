"""`qfx.draw` and `qfx.draw_mpl`. The expected drawings are written out by hand from the layout rules in
`qfx/_drawing.py`: each item goes into the first column after every earlier item on the rows it spans; a
gate is `─label─` (labels centred on its widest), a column is as wide as its widest item (the others padded
with `─` on the right), and every line ends with one `─`."""

import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import qfx

D = "─"


def _sample():
    """Gates on disjoint wires (H, RY, RX) share the first column; the CRZ crosses wire 1."""
    return qfx.Circuit(
        [
            qfx.H(0),
            qfx.RY(0.3, wires=1),
            qfx.CNOT(wires=(0, 1)),
            qfx.RX(0.1, wires=2),
            qfx.CRZ(0.2, wires=(2, 0)),
            qfx.Toffoli(wires=(0, 1, 3)),
        ],
        num_wires=5,
    )


def test_gates_on_disjoint_wires_share_a_column_and_idle_wires_are_hidden():
    assert qfx.draw(_sample()).split("\n") == [
        "0: ─H─────────●──RZ(0.20)──●──",
        "1: ─RY(0.30)──X─────│──────●──",
        "2: ─RX(0.10)────────●──────│──",
        "3: " + D * 24 + "X──",
    ]


def test_wire_order_and_show_all_wires():
    # Rows 3, 2, 0, 1, 4: the CRZ (wires 2, 0) now joins adjacent rows, the Toffoli crosses wire 2.
    assert qfx.draw(_sample(), wire_order=[3, 2], show_all_wires=True).split("\n") == [
        "3: " + D * 24 + "X──",
        "2: ─RX(0.10)────────●──────│──",
        "0: ─H─────────●──RZ(0.20)──●──",
        "1: ─RY(0.30)──X────────────●──",
        "4: " + D * 27,
    ]


def test_wraps_at_max_length():
    # Columns of widths 10, 3, 10, 3 after a 3-character prefix: 3 + 13 + 1 fits in 20, one more does not.
    text = qfx.draw(_sample(), max_length=20)
    assert text.split("\n") == [
        "0: ─H─────────●──",
        "1: ─RY(0.30)──X──",
        "2: ─RX(0.10)─────",
        "3: " + D * 14,
        "",
        "0: ─RZ(0.20)──●──",
        "1: ────│──────●──",
        "2: ────●──────│──",
        "3: " + D * 11 + "X──",
    ]
    assert max(len(line) for line in text.split("\n")) <= 20


def test_short_labels_and_decimals():
    circ = qfx.Circuit(
        [
            qfx.H(0),
            qfx.X(1),
            qfx.RY(0.3, wires=0),
            qfx.Rot(0.1, 0.2, 0.3, wires=1),
            qfx.S(0),
            qfx.Adjoint(qfx.S(1)),
            qfx.PhaseShift(0.5, wires=0),
            qfx.QubitUnitary(np.eye(2), wires=1),
        ]
    )
    assert qfx.draw(circ).split("\n") == [
        "0: ─H──RY(0.30)" + D * 13 + "S───Rϕ(0.50)──",
        "1: ─X──Rot(0.10,0.20,0.30)──S†──U" + D * 9,
    ]
    assert qfx.draw(circ, decimals=None).split("\n") == ["0: ─H──RY───S───Rϕ──", "1: ─X──Rot──S†──U───"]
    assert "RY(0.3000)" in qfx.draw(circ, decimals=4)


def test_controls_targets_and_the_order_of_wires_are_visible():
    circ = qfx.Circuit(
        [
            qfx.CRX(0.3, wires=(2, 0)),
            qfx.CSWAP((1, 2, 0)),
            qfx.PauliRot(0.2, "XZ", wires=(1, 0)),
            qfx.QubitUnitary(np.eye(4), wires=(2, 0)),
            qfx.ISWAP((0, 2)),  # symmetric: the same on both wires
            qfx.Controlled(qfx.RY(1.25, wires=1), controls=(2,), control_values=(0,)),
        ]
    )
    assert qfx.draw(circ).split("\n") == [
        "0: ─RX(0.30)──×──PauliRot(0.20):Z──U:1──ISWAP" + D * 12,
        "1: ────│──────●──PauliRot(0.20):X───│─────│────RY(1.25)──",
        "2: ────●──────×" + D * 20 + "U:0──ISWAP─────○──────",
    ]


def test_inverses_keep_controls_and_dagger_the_rest():
    circ = qfx.Circuit(
        [
            qfx.Adjoint(qfx.CRZ(0.2, wires=(1, 0))),
            qfx.Adjoint(qfx.Controlled(qfx.RX(0.1, wires=0), 2)),
            qfx.Adjoint(qfx.QubitUnitary(np.eye(4), wires=(2, 1))),
            qfx.Adjoint(qfx.CNOT((2, 0))),  # self-inverse: drawn as the gate
            qfx.Adjoint(qfx.Adjoint(qfx.S(1))),  # two daggers cancel
        ]
    )
    assert qfx.draw(circ).split("\n") == [
        "0: ─RZ†(0.20)──RX†(0.10)" + D * 8 + "X" + D * 5,
        "1: ─────●──────────│──────U†:1──│──S──",
        "2: " + D * 16 + "●" + D * 6 + "U†:0──●" + D * 5,
    ]
    # The inverse of a circuit draws the same way.
    inverse = qfx.Circuit([qfx.CRY(0.5, wires=(0, 1)), qfx.S(0)]).inverse()
    assert qfx.draw(inverse).split("\n") == ["0: ─S†──────●──────", "1: ─────RY†(0.50)──"]


def test_repeat_is_folded_with_its_count():
    def layer(t):
        return [qfx.RY(t[0], wires=0), qfx.RY(t[1], wires=1), qfx.CNOT(wires=(0, 1))]

    circ = qfx.Circuit([qfx.H(2), qfx.repeat(layer, jnp.ones((4, 2))), qfx.X(2)])
    # One layer is drawn; its parameters differ between layers: "·".
    assert qfx.draw(circ).split("\n") == [
        "0: [─RY(·)──●─]×4────",
        "1: [─RY(·)──X─]  ────",
        "2: ─H" + D * 13 + "X──",
    ]


def test_conditionals_and_while_loops_come_after_the_measurements_they_read():
    m = qfx.measure(0)
    circ = qfx.Circuit(
        [qfx.H(0), m, qfx.cond(m, [qfx.X(1)], [qfx.H(1)]), qfx.while_loop(m, [qfx.H(0), m], max_iterations=3)]
    )
    # The cond (wire 1) after M0 (wire 0); the while loop, which measures m0 again, after the cond.
    assert qfx.draw(circ).split("\n") == [
        "0: ─H──M0─" + D * 22 + "[while m0: ─H──M0─]≤3─",
        "1: " + D * 7 + "[if m0: ─X─│else: ─H─]" + D * 22,
    ]


def test_a_read_comes_after_every_measurement_before_it():
    # M1 (wire 1) packs into the first column, M0 into the second; the cond on m1 (wire 2) goes after both,
    # classical wires not being drawn: after the last column holding a measurement, not after M1's only.
    m0, m1 = qfx.measure(0), qfx.measure(1)
    circ = qfx.Circuit([qfx.RX(0.5, wires=0), m0, m1, qfx.cond(m1, qfx.X(2))])
    assert qfx.draw(circ).split("\n") == [
        "0: ─RX(0.50)──M0─" + D * 13,
        "1: ─M1" + D * 24,
        "2: " + D * 14 + "[if m1: ─X─]─",
    ]


def _rx_loop(i, thetas):
    return [qfx.RX(thetas[i], wires=0), qfx.CNOT(wires=(0, 1))]


def test_for_loops_are_folded_with_their_count():
    circ = qfx.Circuit([qfx.for_loop(3, _rx_loop, jnp.ones(3)), qfx.RY(0.5, wires=1)])
    assert qfx.draw(circ).split("\n") == [
        "0: [for i: ─RX(·)──●─]×3" + D * 11,
        "1: [       ────────X─]  ─RY(0.50)──",
    ]


def test_an_empty_circuit_draws_its_wires():
    assert qfx.draw(qfx.Circuit([], num_wires=2)).split("\n") == ["0: ─", "1: ─"]


def test_draw_errors():
    circ = qfx.Circuit([qfx.H(0), qfx.CNOT((0, 1))])
    with pytest.raises(ValueError, match=r"qfx.draw: wire_order holds 5, which is not a wire of the circuit"):
        qfx.draw(circ, wire_order=[5])
    with pytest.raises(ValueError, match="qfx.draw: wire_order lists wire 1 twice"):
        qfx.draw(circ, wire_order=[1, 1])
    with pytest.raises(TypeError, match="qfx.draw: wire_order must be a sequence of wires, got 1"):
        qfx.draw(circ, wire_order=1)
    with pytest.raises(ValueError, match="qfx.draw: max_length must be a positive int, got 0"):
        qfx.draw(circ, max_length=0)
    with pytest.raises(ValueError, match="qfx.draw_mpl: decimals must be a non-negative int or None, got -1"):
        qfx.draw_mpl(circ, decimals=-1)


def test_draw_mpl_returns_a_figure():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # noqa: PLC0415 - after the backend is chosen

    m = qfx.measure(0)
    circ = qfx.Circuit(
        [*_sample().ops, qfx.repeat(lambda t: [qfx.RY(t, wires=1)], jnp.ones(3)), m, qfx.cond(m, qfx.X(2))]
    )
    fig = qfx.draw_mpl(circ, wire_order=[1, 0])
    assert isinstance(fig, Figure)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"H", "RY(0.30)", "RZ(0.20)", "M0", "×3", "if m0:", "1", "0"} <= texts


def test_import_qfx_does_not_import_matplotlib():
    code = "import sys, qfx; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_noise_channels_show_short_names_and_strengths():
    # Depol(0.10) and AmpDamp(0.20): a column per item, since each follows the one before on its wire.
    circ = qfx.Circuit(
        [
            qfx.H(0),
            qfx.DepolarizingChannel(0.1, wires=0),
            qfx.CNOT(wires=(0, 1)),
            qfx.AmplitudeDamping(0.2, wires=1),
            qfx.PauliError("XZ", 0.3, wires=(0, 1)),
        ]
    )
    assert qfx.draw(circ).split("\n") == [
        "0: ─H──Depol(0.10)──●─────────────────PauliError(0.30):0──",
        "1: ─────────────────X──AmpDamp(0.20)──PauliError(0.30):1──",
    ]
