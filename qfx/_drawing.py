"""Drawings of circuits: `qfx.draw` (text) and `qfx.draw_mpl` (a matplotlib figure, imported lazily).

Both draw one layout. A circuit becomes a list of items: a `_Box` per gate or measurement (what it shows
on each of its wires) and a `_Block` per `Repeat`, loop or conditional (its parts, each a list of items,
and a closing label with the trip count). Blocks are drawn once, never unrolled. Items are packed into
columns: an item goes into the first column after every earlier item on the rows it spans (its wires and
the rows between them, which its vertical line crosses), so gates on disjoint wires share a column.

Control flow and mid-circuit measurements (`qfx/_control/`) describe themselves through `draw_into(drawer,
numbering)`, calling the drawer's `box`, `block` and `add`: this module does not import that wing.
"""

from collections.abc import Callable, Sequence
import dataclasses
from typing import Any

import jax

from ._channels import AbstractChannel
from ._checks import host_number, static_int
from ._circuit import Circuit, Repeat, _check_is_circuit, relabel_ops
from ._gates import AbstractGate, Adjoint

# Short labels (PennyLane's where it has one): `H`, not `Hadamard`.
_SHORT = {
    "Hadamard": "H",
    "PauliX": "X",
    "PauliY": "Y",
    "PauliZ": "Z",
    "Identity": "I",
    "PhaseShift": "Rϕ",
    "QubitUnitary": "U",
    # channels
    "DepolarizingChannel": "Depol",
    "AmplitudeDamping": "AmpDamp",
    "GeneralizedAmplitudeDamping": "GenAmpDamp",
    "PhaseDamping": "PhaseDamp",
    "ThermalRelaxationError": "ThermalRelax",
    "QubitChannel": "Kraus",
}
# Two-qubit gates drawn as a control (the first wire) and the named gate on the target.
_CONTROLLED = {
    "CRX": "RX",
    "CRY": "RY",
    "CRZ": "RZ",
    "CRot": "Rot",
    "ControlledPhaseShift": "Rϕ",
    "CY": "Y",
}
# Gates unchanged by a permutation of their wires: drawn with the same label on each.
_SYMMETRIC = ("ISWAP", "IsingXX", "IsingYY", "IsingZZ", "IsingXY", "MultiRZ")
# Marks that are not labels (not daggered, drawn as symbols by `draw_mpl`).
_MARKS = ("●", "○", "×")


@dataclasses.dataclass
class _Box:
    """A gate or a measurement: its text on each of its wires (the rows between show a vertical line)."""

    texts: dict[int, str]
    measures: bool = False  # a mid-circuit measurement


@dataclasses.dataclass
class _Block:
    """A `Repeat`, a loop or a conditional on `wires`: parts `(label, items)`, then a closing label.
    `reads`: it reads measurement outcomes (a condition on them)."""

    wires: tuple[int, ...]
    parts: list[tuple[str, list]]
    closing: str
    reads: bool = False

    @property
    def measures(self) -> bool:
        return any(item.measures for _, items in self.parts for item in items)


def _dagger(text: str) -> str:
    """The label of the inverse gate: `RZ(0.30)` -> `RZ†(0.30)`, `U:0` -> `U†:0` (and `RZ†` back to `RZ`)."""
    cut = min((i for i in (text.find("("), text.find(":")) if i >= 0), default=len(text))
    name = text[:cut]
    return (name[:-1] if name.endswith("†") else name + "†") + text[cut:]


class _Drawer:
    """Turns operations into items. Control-flow operations call `box`, `block` and `add` (their
    `draw_into`); a loop body calls `add` while traced, so its index-dependent parameters show as "·"."""

    def __init__(self, decimals: int | None):
        self.decimals = decimals
        self.stack: list[list] = [[]]
        # The circuit's measurements, numbered afresh (token -> id): an `eqx.tree_at` edit that puts in
        # new measurements skips `Circuit`'s numbering. Those a loop body makes are numbered after them.
        self.numbering: dict = {}

    def label(self, op: AbstractGate, name: str | None = None) -> str:
        name = name or _SHORT.get(op.name, op.name)
        if self.decimals is None or op.name in ("QubitUnitary", "QubitChannel") or not op.parameters:
            return name
        if len(op.parameters) > 3:
            return name
        values = [host_number(p) for p in op.parameters]
        return name + "(" + ",".join("·" if v is None else f"{v:.{self.decimals}f}" for v in values) + ")"

    def texts(self, op: AbstractGate) -> dict[int, str]:
        """What a gate shows on each of its wires."""
        wires = op.wires
        if isinstance(op, AbstractChannel):  # noise: its name and strengths, wires numbered when several
            if len(wires) == 1:
                return {wires[0]: self.label(op)}
            return {w: f"{self.label(op)}:{k}" for k, w in enumerate(wires)}
        control = op.control()
        if control is not None:
            controls, values, target = control
            marks = {w: ("●" if v else "○") for w, v in zip(controls, values, strict=True)}
            return marks | self.texts(target)
        if isinstance(op, Adjoint):  # the base gate's drawing, each label daggered (self-inverse: as is)
            inner = self.texts(op.base)
            if getattr(op.base, "self_inverse", False):
                return inner
            return {w: t if t in _MARKS else _dagger(t) for w, t in inner.items()}
        if op.name in ("CNOT", "Toffoli"):
            return {w: "●" for w in wires[:-1]} | {wires[-1]: "X"}
        if op.name == "CZ":
            return {w: "●" for w in wires}
        if op.name == "SWAP":
            return {w: "×" for w in wires}
        if op.name == "CSWAP":
            return {wires[0]: "●"} | {w: "×" for w in wires[1:]}
        if op.name in _CONTROLLED:
            return {wires[0]: "●", wires[1]: self.label(op, _CONTROLLED[op.name])}
        if op.name == "PauliRot":  # one gate, each wire's letter (`RX`/`RY` would read as two gates)
            return {w: f"{self.label(op)}:{letter}" for w, letter in zip(wires, op.pauli_word, strict=True)}
        if len(wires) > 1 and op.name not in _SYMMETRIC:  # the order of the wires matters: number them
            return {w: f"{self.label(op)}:{k}" for k, w in enumerate(wires)}
        return {w: self.label(op) for w in wires}

    # --- what control-flow operations call ---------------------------------------------------------

    def box(self, texts: dict[int, str], *, measures: bool = False) -> None:
        """Adds a box showing `texts` (wire -> text); `measures`: a mid-circuit measurement."""
        self.stack[-1].append(_Box(dict(texts), measures))

    def block(
        self,
        wires: Sequence[int],
        parts: Sequence[tuple[str, Callable[[], Any]]],
        closing: str,
        *,
        reads: bool = False,
    ) -> None:
        """Adds a block on `wires`: for each part, its label and a function that `add`s its operations.
        `reads`: the block reads measurement outcomes (it is drawn after every measurement before it)."""
        if not wires:  # nothing happens: nothing to draw
            return
        drawn = []
        for label, draw_part in parts:
            self.stack.append([])
            draw_part()
            drawn.append((label, self.stack.pop()))
        self.stack[-1].append(_Block(tuple(wires), drawn, closing, reads))

    def add(self, op) -> None:
        """Adds an operation."""
        if isinstance(op, Repeat):

            def one_layer():
                if not op.length:  # no layer to index: the body as it is
                    return [self.add(inner) for inner in op.body.ops]

                def trace(body):  # one layer, traced: its parameters show as "·"
                    for inner in jax.tree.map(lambda x: x[0], body).ops:
                        self.add(inner)

                jax.eval_shape(trace, op.body)

            self.block(op.wires, [("", one_layer)], f"]×{op.length}")
        elif hasattr(op, "draw_into"):  # control flow and measurements (qfx/_control/) draw themselves
            op.draw_into(self, self.numbering)
        else:
            self.box(self.texts(op))


# --- layout --------------------------------------------------------------------------------------------


def _wires_of(item) -> tuple[int, ...]:
    return tuple(item.texts) if isinstance(item, _Box) else item.wires


def _columns(items: list, row: dict[int, int]) -> list[list]:
    """Packs items into columns: each into the first column after every earlier item on its rows. The
    classical wires are not drawn, so a block that reads outcomes also comes after every earlier
    measurement, and a measurement after every earlier read, on whatever wire."""
    columns: list[list] = []
    free: dict[int, int] = {}  # row -> the first column free on it
    measured = read = 0  # the first columns after every measurement, every read of outcomes, so far
    for item in items:
        rows = [row[w] for w in _wires_of(item)]
        span = range(min(rows), max(rows) + 1)
        k = max((free.get(r, 0) for r in span), default=0)
        reads = getattr(item, "reads", False)
        if reads:
            k = max(k, measured)
        if item.measures:  # not beside an earlier read of what it may overwrite
            k = max(k, read)
            measured = max(measured, k + 1)
        if reads:
            read = max(read, k + 1)
        if k == len(columns):
            columns.append([])
        columns[k].append(item)
        for r in span:
            free[r] = k + 1
    return columns


def _span(item, row: dict[int, int]) -> range:
    rows = [row[w] for w in _wires_of(item)]
    return range(min(rows), max(rows) + 1)


def _render(item, row: dict[int, int]) -> dict[int, str]:
    """The item's text on each row of its span, all of one width."""
    span = _span(item, row)
    if isinstance(item, _Box):
        by_row = {row[w]: t for w, t in item.texts.items()}
        width = max(len(t) for t in by_row.values())
        return {r: "─" + by_row.get(r, "│").center(width, "─") + "─" for r in span}
    out = {r: "" for r in span}
    for i, (label, items) in enumerate(item.parts):
        for r in span:
            out[r] += ("[" if i == 0 else "│") + (label if r == span[0] else " " * len(label))
        body = _render_columns(_columns(items, row), row, span)
        for r in span:
            out[r] += body[r]
    for r in span:
        out[r] += item.closing if r == span[0] else "]" + " " * (len(item.closing) - 1)
    return out


def _render_column(column: list, row: dict[int, int], rows: range) -> dict[int, str]:
    cells: dict[int, str] = {}
    for item in column:
        cells.update(_render(item, row))
    width = max(len(c) for c in cells.values())
    return {r: cells.get(r, "").ljust(width, "─") for r in rows}


def _render_columns(columns: list[list], row: dict[int, int], rows: range) -> dict[int, str]:
    out = {r: "" for r in rows}
    for column in columns:
        for r, text in _render_column(column, row, rows).items():
            out[r] += text
    return out


def _used_wires(items: list) -> set[int]:
    used = set()
    for item in items:
        used.update(_wires_of(item))
        if isinstance(item, _Block):
            for _, inner in item.parts:
                used |= _used_wires(inner)
    return used


def _rows(circuit: Circuit, items: list, wire_order, show_all_wires: bool, fn: str) -> list[int]:
    """The wires drawn, top to bottom."""
    n = circuit.num_wires
    order: list[int] = []
    if wire_order is not None:
        if isinstance(wire_order, (int, str)) or not isinstance(wire_order, Sequence):
            raise TypeError(f"qfx.{fn}: wire_order must be a sequence of wires, got {wire_order!r}.")
        for w in wire_order:
            k = static_int(w)
            if k is None or not 0 <= k < n:
                raise ValueError(
                    f"qfx.{fn}: wire_order holds {w!r}, which is not a wire of the circuit (0..{n - 1})."
                )
            if k in order:
                raise ValueError(f"qfx.{fn}: wire_order lists wire {k} twice.")
            order.append(k)
    order += [w for w in range(n) if w not in order]
    used = _used_wires(items)
    if show_all_wires or not used:  # an empty circuit draws its wires
        return order
    return [w for w in order if w in used]


def _layout(circuit: Circuit, decimals, wire_order, show_all_wires, fn: str):
    _check_is_circuit(circuit, fn)
    if decimals is not None and (static_int(decimals) is None or decimals < 0):
        raise ValueError(f"qfx.{fn}: decimals must be a non-negative int or None, got {decimals!r}.")
    drawer = _Drawer(decimals)
    for op in relabel_ops(circuit.ops, drawer.numbering):
        drawer.add(op)
    items = drawer.stack[0]
    wires = _rows(circuit, items, wire_order, show_all_wires, fn)
    row = {w: k for k, w in enumerate(wires)}
    return items, wires, row


def draw(
    circuit: Circuit,
    *,
    decimals: int | None = 2,
    max_length: int = 100,
    wire_order: Sequence[int] | None = None,
    show_all_wires: bool = False,
) -> str:
    """A text drawing of a circuit, one line per wire.

    Gates on disjoint wires share a column. Labels are short: `H`, `X`, `RY(0.30)`; controls are `●`
    (on 1) and `○` (on 0) joined to their target by `│`, `SWAP` is `×` on both wires, inverses carry `†`,
    a gate whose wires are not interchangeable numbers them (`U:0`, `U:1`). `Repeat` blocks and loops
    are drawn once, between brackets, with their trip count: `[...]×7`, `[for i: ...]×3`; a parameter that
    differs between iterations shows as `·`. Conditionals draw as `[if m0: ...]`, mid-circuit measurements
    as `M0` (`M0→0` with reset, `M0=1` post-selected), while loops as `[while m0: ...]≤20`.

    **Arguments:**

    - `circuit`: a `qfx.Circuit`.
    - `decimals`: digits after the point of the parameters shown; None shows no parameters.
    - `max_length`: the longest line (in characters); longer drawings wrap into several blocks of lines,
      separated by a blank line, each starting with the wire labels (a single column wider than this is
      not cut).
    - `wire_order`: the wires from top to bottom (the others follow in order).
    - `show_all_wires`: also draw wires that no operation acts on (an empty circuit draws all its wires).

    **Returns:** the drawing, a string.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.RY(0.3, wires=1), qfx.CNOT(wires=(0, 1))])
    print(qfx.draw(circ))
    # 0: ─H─────────●──
    # 1: ─RY(0.30)──X──
    ```
    """
    if static_int(max_length) is None or max_length < 1:
        raise ValueError(f"qfx.draw: max_length must be a positive int, got {max_length!r}.")
    items, wires, row = _layout(circuit, decimals, wire_order, show_all_wires, "draw")
    rows = range(len(wires))
    prefix = {r: f"{w}: " for r, w in enumerate(wires)}
    width = max(len(p) for p in prefix.values())
    prefix = {r: p.rjust(width) for r, p in prefix.items()}
    chunks: list[dict[int, str]] = []
    line = {r: "" for r in rows}
    for column in _columns(items, row):
        cells = _render_column(column, row, rows)
        cell_width = len(cells[0])
        if line[0] and width + len(line[0]) + cell_width + 1 > max_length:
            chunks.append(line)
            line = {r: "" for r in rows}
        for r in rows:
            line[r] += cells[r]
    chunks.append(line)
    return "\n\n".join("\n".join(prefix[r] + chunk[r] + "─" for r in rows) for chunk in chunks)


def draw_mpl(
    circuit: Circuit,
    *,
    decimals: int | None = 2,
    wire_order: Sequence[int] | None = None,
    show_all_wires: bool = False,
):
    """A matplotlib drawing of a circuit: the layout of `qfx.draw`, with boxes, dots and brackets.

    Needs matplotlib (the `examples` extra), imported when called, never by `import qfx`. The figure is a
    `matplotlib.figure.Figure` made without pyplot (no global state, no window): save it with
    `fig.savefig("circuit.png")`, or show it in a notebook by returning it from a cell.

    **Arguments:**

    - `circuit`, `decimals`, `wire_order`, `show_all_wires`: as for `qfx.draw`.

    **Returns:** a `matplotlib.figure.Figure`.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.RY(0.3, wires=1), qfx.CNOT(wires=(0, 1))])
    fig = qfx.draw_mpl(circ)  # then fig.savefig("circuit.png")
    ```
    """
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional, imported when called
        from matplotlib.patches import Circle, Rectangle  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(
            "qfx.draw_mpl needs matplotlib: pip install matplotlib (or the examples extra of a checkout: "
            'pip install -e ".[examples]").'
        ) from e
    items, wires, row = _layout(circuit, decimals, wire_order, show_all_wires, "draw_mpl")
    char = 0.11  # the width of a character of the labels, in units of the wire spacing

    def box_width(item) -> float:
        texts = [t for t in item.texts.values() if t not in _MARKS]
        return max([0.6] + [char * len(t) + 0.3 for t in texts])

    # Positions: x of each item, widths of columns; blocks get their own inner layout.
    shapes: list[tuple] = []  # ("box", item, x, width) / ("block", item, x0, x1, labels)

    def place(items: list, x: float) -> float:
        for column in _columns(items, row):
            end = x
            for item in column:
                end = max(end, place_item(item, x))
            x = end + 0.25
        return x

    def place_item(item, x: float) -> float:
        if isinstance(item, _Box):
            w = box_width(item)
            shapes.append(("box", item, x, w))
            return x + w
        start = x
        labels = []
        for label, inner in item.parts:
            labels.append((x, label.strip()))
            x = place(inner, x + 0.2 + char * len(label.strip()))
        shapes.append(("block", item, start, x, labels))
        return x + char * len(item.closing)

    end = place(items, 0.5)
    height = len(wires)
    fig = Figure(figsize=(max(3.0, 0.9 * end + 1.0), 0.7 * height + 0.6))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(-0.6, end + 0.3)
    ax.set_ylim(height - 0.3, -0.9)
    ax.axis("off")
    for r, w in enumerate(wires):
        ax.plot([0, end], [r, r], color="black", lw=1, zorder=1)
        ax.text(-0.15, r, str(w), ha="right", va="center", fontsize=11)
    for shape in shapes:
        if shape[0] == "box":
            _, item, x, w = shape
            rows = {row[wire]: t for wire, t in item.texts.items()}
            cx = x + w / 2
            if len(rows) > 1:
                ax.plot([cx, cx], [min(rows), max(rows)], color="black", lw=1, zorder=2)
            for r, t in rows.items():
                if t in ("●", "○"):
                    ax.add_patch(Circle((cx, r), 0.1, facecolor="black" if t == "●" else "white",
                                        edgecolor="black", zorder=3))  # fmt: skip
                elif t == "×":
                    ax.text(cx, r, "×", ha="center", va="center", fontsize=16, zorder=3)
                else:
                    ax.add_patch(
                        Rectangle((x, r - 0.3), w, 0.6, facecolor="white", edgecolor="black", zorder=3)
                    )
                    ax.text(cx, r, t, ha="center", va="center", fontsize=10, zorder=4)
        else:
            _, item, x0, x1, labels = shape
            span = _span(item, row)
            ax.add_patch(
                Rectangle(
                    (x0, span[0] - 0.42),
                    x1 - x0,
                    len(span) - 0.16,
                    fill=False,
                    linestyle="--",
                    edgecolor="tab:blue",
                    zorder=2,
                )  # fmt: skip
            )
            for x, label in labels:
                if label:
                    ax.text(
                        x + 0.05, span[0] - 0.47, label, ha="left", va="bottom", fontsize=9, color="tab:blue"
                    )
            closing = item.closing.lstrip("]")
            if closing:
                ax.text(
                    x1 + 0.02, span[0] - 0.47, closing, ha="left", va="bottom", fontsize=9, color="tab:blue"
                )
    return fig
