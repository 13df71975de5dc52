"""Noise channels: operations whose strengths are leaves, acting on a mixed state by Kraus operators.

Names, signatures and conventions are PennyLane's (`qml.BitFlip(p, wires)`, `qml.PauliError("XZ", p,
wires)`, `qml.QubitChannel(K_list, wires)`, ...): a channel maps `rho -> sum_i K_i rho K_i^dagger`, with
`sum_i K_i^dagger K_i = I` (completely positive and trace preserving).

Each channel gives its Kraus operators as weights and matrices, `K_i = sqrt(w_i) M_i`
(`weighted_kraus`): the weights are linear in the strengths (`BitFlip(p)`: `w = (1 - p, p)`), so the
superoperator `sum_i w_i M_i (x) conj(M_i)` that the density-matrix backend applies has no square root of
a strength, and its derivatives stay finite at the ends of the range (at `p = 0` too), and a trajectory's
branch probability `w_i <psi|M_i^dagger M_i|psi>` is smooth in the strengths.

A channel is not a gate (it is not unitary): `qfx.StateVector()` refuses circuits that hold one and names
the two backends that simulate them, `qfx.DensityMatrix()` (exact) and `qfx.Trajectories()` (sampled).
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike
import numpy as np

from ._checks import as_dtype, as_numeric, check_wires, host_number, is_concrete
from ._custom_types import EXACT, complex_dtype, real_dtype, tolerance
from ._gates import AFFINE, AbstractGate, AbstractOperation, ShiftRule
from ._observables import pauli_word_matrix

_I = np.eye(2)
_P00 = np.array([[1, 0], [0, 0]])  # |0><0|
_P01 = np.array([[0, 1], [0, 0]])  # |0><1|
_P10 = np.array([[0, 0], [1, 0]])  # |1><0|
_P11 = np.array([[0, 0], [0, 1]])  # |1><1|


def _const(*matrices) -> Array:
    return jnp.asarray(np.stack(matrices), complex_dtype())


def _words(words) -> Array:
    """The matrices of Pauli words (`pauli_branches()`), stacked."""
    return _const(*(pauli_word_matrix(word) for word in words))


def _diag(a, b) -> Array:
    """`diag(a, b)` from real scalars (numbers or arrays), in the default complex dtype: a sum of constant
    matrices, which compiles to a few elementwise operations (not scatters)."""
    c = complex_dtype()
    return jnp.asarray(a).astype(c) * _const(_P00)[0] + jnp.asarray(b).astype(c) * _const(_P11)[0]


def _strength(name: str, field: str, value) -> Array:
    """A channel's strength as a real scalar array of the default float dtype."""
    dtype = getattr(value, "dtype", None)
    if isinstance(value, complex) or (dtype is not None and jnp.issubdtype(dtype, jnp.complexfloating)):
        raise TypeError(f"{name}: {field} must be real, got the complex value {value!r}.")
    value = as_numeric(value, f"{name}: {field}", inexact=True)
    if value.shape != ():
        raise ValueError(
            f"{name}: {field} must be a scalar, got shape {value.shape}. For a batch of circuits, build "
            "them with eqx.filter_vmap or map qfx functions with jax.vmap."
        )
    return as_dtype(value, real_dtype())


def _in_range(name: str, field: str, value: Array, low: float, high: float | None = None) -> None:
    """Raises when a concrete `value` is outside `[low, high]` (`high=None`: no upper bound); traced values
    (under jit, grad, vmap) are accepted as they are."""
    x = host_number(value)
    if x is None:
        return
    if not (low <= x and (high is None or x <= high)):  # NaN fails too
        where = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}: {field} must be in {where}, got {x!r}.")


class AbstractChannel(AbstractOperation):
    """A quantum channel on `len(wires)` qubits: strengths are array leaves, wires are static.

    Subclasses give `weighted_kraus()`, the Kraus operators as `K_i = sqrt(w_i) M_i`. `mixture` says the
    `M_i` are unitary (a random unitary: `BitFlip`, `DepolarizingChannel`, `PauliError`), so a branch's
    probability is its weight, whatever the state.
    """

    num_wires: ClassVar[int | None]
    param_names: ClassVar[tuple[str, ...]] = ()
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...] | None] = None
    # Read by qfx.diff.ParameterShift, per strength: AFFINE where the Kraus weights are affine in it and the
    # matrices do not depend on it (then every measurement that ParameterShift takes is affine in it);
    # None where not (differentiate those by backprop or finite differences).
    shift_rules: ClassVar[tuple[ShiftRule | None, ...] | None] = None
    mixture: ClassVar[bool] = False
    _wires: eqx.AbstractVar[tuple[int, ...]]

    @abc.abstractmethod
    def weighted_kraus(self) -> tuple[Array, Array]:
        """`(w, M)`: real weights of shape `(m,)` and matrices of shape `(m, 2**k, 2**k)` (in the order of
        `wires`, the first most significant), with Kraus operators `K_i = sqrt(w_i) M_i`."""

    @property
    def wires(self) -> tuple[int, ...]:
        return self._wires

    @property
    def parameters(self) -> tuple[Array, ...]:
        return tuple(getattr(self, name) for name in self.param_names)

    @property
    def name(self) -> str:
        return type(self).__name__

    def pauli_branches(self) -> tuple[str, ...] | None:
        """The Pauli word ("I", "X", "Y", "Z", one letter per wire) that each `M_i` is, in the order of
        `weighted_kraus()`, for a Pauli channel; None otherwise."""
        return None

    def kraus_matrices(self) -> Array:
        """The Kraus operators, stacked: shape `(m, 2**k, 2**k)`."""
        w, m = self.weighted_kraus()
        return jnp.sqrt(w).astype(m.dtype)[:, None, None] * m

    def superoperator(self) -> Array:
        """`sum_i K_i (x) conj(K_i)`, a `(4**k, 4**k)` matrix on the channel's ket wires then its bra wires:
        `vec(rho') = S vec(rho)` with `vec(rho)[i, j] = rho[i, j]`. Linear in the weights."""
        w, m = self.weighted_kraus()
        d = m.shape[-1]
        # S[(i, j), (k, l)] = sum_a w_a M_a[i, k] conj(M_a[j, l])
        s = jnp.einsum("a,aik,ajl->ijkl", w.astype(m.dtype), m, m.conj(), precision=EXACT)
        return s.reshape(d * d, d * d)

    def on(self, wires) -> "AbstractChannel":
        """This channel, with the same strength leaves, on other wires (as `qfx.NoiseModel` inserts it)."""
        wires = check_wires(self.name, wires, len(self._wires))
        out = jax.tree.map(lambda x: x, self)  # a fresh module sharing the leaves
        object.__setattr__(out, "_wires", wires)  # modules are frozen; this is a fresh copy
        return out

    def adjoint(self):
        raise ValueError(
            f"{self!r} is a noise channel, which has no inverse: Circuit.inverse() needs gates only."
        )

    def __repr__(self):
        params = []
        for p in self.parameters:
            value = host_number(p)
            if value is not None:
                params.append(f"{value:.4g}")
            elif hasattr(p, "shape"):
                params.append(f"{type(p).__name__}{tuple(p.shape)}")
            else:
                params.append(repr(p))
        wires = self.wires[0] if len(self.wires) == 1 else self.wires
        return f"{self.name}({', '.join(params + [f'wires={wires}'])})"


class _AbstractOneStrength(AbstractChannel):
    """A one-qubit channel with one strength `p` (or `gamma`) in [0, 1]."""

    num_wires: ClassVar[int] = 1
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),)

    def _init(self, field: str, value, wires) -> None:
        self._wires = check_wires(self.name, wires, 1)
        value = _strength(self.name, field, value)
        _in_range(self.name, field, value, 0.0, 1.0)
        setattr(self, field, value)


class BitFlip(_AbstractOneStrength):
    """Flips the qubit with probability `p`: Kraus operators `sqrt(1 - p) I` and `sqrt(p) X`.

    **Arguments:** `p` in [0, 1] (a leaf); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.BitFlip(0.1, wires=0)])
    qfx.probs(circ)  # [0.9, 0.1], on qfx.DensityMatrix() (the default for noisy circuits)
    ```
    """

    p: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("p",)
    mixture: ClassVar[bool] = True
    shift_rules: ClassVar[tuple[ShiftRule, ...]] = (AFFINE,)

    def __init__(self, p: ArrayLike, wires):
        self._init("p", p, wires)

    def pauli_branches(self):
        return ("I", "X")

    def weighted_kraus(self):
        return jnp.stack([1 - self.p, self.p]), _words(self.pauli_branches())


class PhaseFlip(_AbstractOneStrength):
    """Applies Z with probability `p`: Kraus operators `sqrt(1 - p) I` and `sqrt(p) Z`.

    **Arguments:** `p` in [0, 1] (a leaf); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.PhaseFlip(0.1, wires=0)])
    qfx.expval(circ, qfx.X(0))  # 1 - 2 * 0.1
    ```
    """

    p: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("p",)
    mixture: ClassVar[bool] = True
    shift_rules: ClassVar[tuple[ShiftRule, ...]] = (AFFINE,)

    def __init__(self, p: ArrayLike, wires):
        self._init("p", p, wires)

    def pauli_branches(self):
        return ("I", "Z")

    def weighted_kraus(self):
        return jnp.stack([1 - self.p, self.p]), _words(self.pauli_branches())


class DepolarizingChannel(_AbstractOneStrength):
    """The depolarising channel, PennyLane's convention: `sqrt(1 - p) I` and `sqrt(p / 3)` times each of
    X, Y, Z. At `p = 3/4` the output is maximally mixed whatever the input.

    **Arguments:** `p` in [0, 1] (a leaf); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.DepolarizingChannel(0.3, wires=0)])
    qfx.expval(circ, qfx.Z(0))  # 1 - 4 * 0.3 / 3
    ```
    """

    p: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("p",)
    mixture: ClassVar[bool] = True
    shift_rules: ClassVar[tuple[ShiftRule, ...]] = (AFFINE,)

    def __init__(self, p: ArrayLike, wires):
        self._init("p", p, wires)

    def pauli_branches(self):
        return ("I", "X", "Y", "Z")

    def weighted_kraus(self):
        q = self.p / 3
        return jnp.stack([1 - self.p, q, q, q]), _words(self.pauli_branches())


class AmplitudeDamping(_AbstractOneStrength):
    """Energy relaxation towards |0> with probability `gamma`: `K0 = [[1, 0], [0, sqrt(1 - gamma)]]`,
    `K1 = [[0, sqrt(gamma)], [0, 0]]`.

    **Arguments:** `gamma` in [0, 1] (a leaf); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.X(0), qfx.AmplitudeDamping(0.2, wires=0)])
    qfx.probs(circ)  # [0.2, 0.8]
    ```
    """

    gamma: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("gamma",)

    def __init__(self, gamma: ArrayLike, wires):
        self._init("gamma", gamma, wires)

    def weighted_kraus(self):
        k0 = _diag(1, jnp.sqrt(1 - self.gamma))
        return jnp.stack([jnp.ones_like(self.gamma), self.gamma]), jnp.stack([k0, _const(_P01)[0]])


class PhaseDamping(_AbstractOneStrength):
    """Loss of coherence without loss of energy: `K0 = [[1, 0], [0, sqrt(1 - gamma)]]`,
    `K1 = [[0, 0], [0, sqrt(gamma)]]`; off-diagonal entries shrink by `sqrt(1 - gamma)`.

    **Arguments:** `gamma` in [0, 1] (a leaf); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.H(0), qfx.PhaseDamping(0.36, wires=0)])
    qfx.expval(circ, qfx.X(0))  # sqrt(1 - 0.36) = 0.8
    ```
    """

    gamma: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("gamma",)

    def __init__(self, gamma: ArrayLike, wires):
        self._init("gamma", gamma, wires)

    def weighted_kraus(self):
        k0 = _diag(1, jnp.sqrt(1 - self.gamma))
        return jnp.stack([jnp.ones_like(self.gamma), self.gamma]), jnp.stack([k0, _const(_P11)[0]])


class GeneralizedAmplitudeDamping(AbstractChannel):
    """Relaxation towards a thermal state with excited-state population `p`, PennyLane's convention:
    `sqrt(1 - p) [[1, 0], [0, sqrt(1 - gamma)]]`, `sqrt(1 - p) [[0, sqrt(gamma)], [0, 0]]`,
    `sqrt(p) [[sqrt(1 - gamma), 0], [0, 1]]`, `sqrt(p) [[0, 0], [sqrt(gamma), 0]]`.

    **Arguments:** `gamma` and `p` in [0, 1] (leaves); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.GeneralizedAmplitudeDamping(1.0, 0.7, wires=0)])
    qfx.probs(circ)  # [0.3, 0.7]
    ```
    """

    gamma: Array
    p: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[int] = 1
    param_names: ClassVar[tuple[str, ...]] = ("gamma", "p")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((), ())
    shift_rules: ClassVar[tuple[ShiftRule | None, ...]] = (None, AFFINE)  # affine in p, not gamma

    def __init__(self, gamma: ArrayLike, p: ArrayLike, wires):
        self._wires = check_wires("GeneralizedAmplitudeDamping", wires, 1)
        self.gamma = _strength("GeneralizedAmplitudeDamping", "gamma", gamma)
        self.p = _strength("GeneralizedAmplitudeDamping", "p", p)
        _in_range("GeneralizedAmplitudeDamping", "gamma", self.gamma, 0.0, 1.0)
        _in_range("GeneralizedAmplitudeDamping", "p", self.p, 0.0, 1.0)

    def weighted_kraus(self):
        s = jnp.sqrt(1 - self.gamma)
        k0, k2 = _diag(1, s), _diag(s, 1)
        w = jnp.stack([1 - self.p, (1 - self.p) * self.gamma, self.p, self.p * self.gamma])
        return w, jnp.stack([k0, _const(_P01)[0], k2, _const(_P10)[0]])


class ResetError(AbstractChannel):
    """Resets the qubit to |0> with probability `p0` and to |1> with probability `p1` (PennyLane's
    Kraus operators: `sqrt(1 - p0 - p1) I`, `sqrt(p0) |0><0|`, `sqrt(p0) |0><1|`, `sqrt(p1) |1><0|`,
    `sqrt(p1) |1><1|`).

    **Arguments:** `p0`, `p1` in [0, 1] with `p0 + p1 <= 1` (leaves); `wires`: one wire.

    ```python
    circ = qfx.Circuit([qfx.ResetError(0.1, 0.2, wires=0)])
    qfx.probs(circ)  # [0.8, 0.2]
    ```
    """

    p0: Array
    p1: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[int] = 1
    param_names: ClassVar[tuple[str, ...]] = ("p0", "p1")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((), ())

    def __init__(self, p0: ArrayLike, p1: ArrayLike, wires):
        self._wires = check_wires("ResetError", wires, 1)
        self.p0 = _strength("ResetError", "p0", p0)
        self.p1 = _strength("ResetError", "p1", p1)
        _in_range("ResetError", "p0", self.p0, 0.0, 1.0)
        _in_range("ResetError", "p1", self.p1, 0.0, 1.0)
        total = host_number(self.p0 + self.p1) if is_concrete(self.p0) and is_concrete(self.p1) else None
        if total is not None and total > 1 + float(jnp.finfo(real_dtype()).eps):
            raise ValueError(f"ResetError: p0 + p1 must be at most 1, got p0 + p1 = {total!r}.")

    def weighted_kraus(self):
        w = jnp.stack([1 - self.p0 - self.p1, self.p0, self.p0, self.p1, self.p1])
        return w, _const(_I, _P00, _P01, _P10, _P11)


class PauliError(AbstractChannel):
    """Applies the Pauli word `operators` to `wires` with probability `p`: `sqrt(1 - p) I` and
    `sqrt(p) P`.

    **Arguments:**

    - `operators`: a string of "I", "X", "Y", "Z", one letter per wire (static).
    - `p` in [0, 1] (a leaf).
    - `wires`: as many wires as letters.

    ```python
    circ = qfx.Circuit([qfx.PauliError("XX", 0.25, wires=(0, 1))])
    qfx.probs(circ)  # [0.75, 0, 0, 0.25]
    ```
    """

    p: Array
    operators: str = eqx.field(static=True)
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    param_names: ClassVar[tuple[str, ...]] = ("p",)
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),)
    mixture: ClassVar[bool] = True
    shift_rules: ClassVar[tuple[ShiftRule, ...]] = (AFFINE,)

    def __init__(self, operators: str, p: ArrayLike, wires):
        self._wires = check_wires("PauliError", wires, None)
        if not isinstance(operators, str) or not operators or set(operators) - set("IXYZ"):
            raise ValueError(
                f"PauliError: operators must be a string of 'I', 'X', 'Y', 'Z' (one per wire), got "
                f"{operators!r}."
            )
        if len(operators) != len(self._wires):
            raise ValueError(
                f"PauliError: operators={operators!r} has {len(operators)} letter(s), but wires="
                f"{self._wires} has {len(self._wires)}; give one letter per wire."
            )
        self.operators = operators
        self.p = _strength("PauliError", "p", p)
        _in_range("PauliError", "p", self.p, 0.0, 1.0)

    def pauli_branches(self):
        return ("I" * len(self.operators), self.operators)

    def weighted_kraus(self):
        return jnp.stack([1 - self.p, self.p]), _words(self.pauli_branches())


class ThermalRelaxationError(AbstractChannel):
    """Thermal relaxation during a gate of duration `tq`, with relaxation time `t1`, dephasing time `t2`
    and excited-state population `pe` at equilibrium (PennyLane's signature and channel).

    Populations relax as `P(0 -> 1) = pe (1 - exp(-tq / t1))`, `P(1 -> 0) = (1 - pe)(1 - exp(-tq / t1))`;
    coherences decay by `exp(-tq / t2)`. Physical when `t2 <= 2 t1`. One set of Kraus operators serves
    both `t2 <= t1` and `t2 > t1` (PennyLane switches between two), so derivatives are smooth across
    `t2 = t1`: `diag(sqrt(A), e2 / sqrt(A))`, `sqrt(B - e2**2 / A) |1><1|`, `sqrt(pe r) |1><0|`,
    `sqrt((1 - pe) r) |0><1|` with `r = 1 - exp(-tq / t1)`, `A = 1 - pe r`, `B = 1 - (1 - pe) r`,
    `e2 = exp(-tq / t2)` (the same channel: same populations, same coherence).

    **Arguments:** `pe` in [0, 1], `t1 > 0`, `t2 > 0` with `t2 <= 2 t1`, `tq >= 0` (leaves); `wires`.

    ```python
    circ = qfx.Circuit([qfx.X(0), qfx.ThermalRelaxationError(0.0, 100.0, 80.0, 10.0, wires=0)])
    qfx.probs(circ)  # [1 - exp(-0.1), exp(-0.1)]
    ```
    """

    pe: Array
    t1: Array
    t2: Array
    tq: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[int] = 1
    param_names: ClassVar[tuple[str, ...]] = ("pe", "t1", "t2", "tq")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((), (), (), ())

    def __init__(self, pe: ArrayLike, t1: ArrayLike, t2: ArrayLike, tq: ArrayLike, wires):
        name = "ThermalRelaxationError"
        self._wires = check_wires(name, wires, 1)
        self.pe, self.t1, self.t2, self.tq = (
            _strength(name, f, v) for f, v in (("pe", pe), ("t1", t1), ("t2", t2), ("tq", tq))
        )
        _in_range(name, "pe", self.pe, 0.0, 1.0)
        _in_range(name, "tq", self.tq, 0.0)
        for field in ("t1", "t2"):
            x = host_number(getattr(self, field))
            if x is not None and not x > 0:
                raise ValueError(f"{name}: {field} must be > 0, got {x!r}.")
        t1, t2 = host_number(self.t1), host_number(self.t2)
        if t1 is not None and t2 is not None and t2 > 2 * t1:
            raise ValueError(
                f"{name}: t2 must be at most 2 * t1 (a physical channel), got t1={t1!r}, t2={t2!r}."
            )

    def weighted_kraus(self):
        r = 1 - jnp.exp(-self.tq / self.t1)
        e2 = jnp.exp(-self.tq / self.t2)
        a = 1 - self.pe * r
        b = 1 - (1 - self.pe) * r
        sa = jnp.sqrt(a)
        k0 = _diag(sa, e2 / sa)
        # A B >= e2**2 exactly when t2 <= 2 t1; clipped against rounding.
        w = jnp.stack([jnp.ones_like(a), jnp.maximum(b - e2**2 / a, 0), self.pe * r, (1 - self.pe) * r])
        return w, jnp.stack([k0, _const(_P11)[0], _const(_P10)[0], _const(_P01)[0]])


def check_cptp(kraus, what: str, dtype=None) -> None:
    """Raises unless the concrete Kraus stack satisfies `sum_i K_i^dagger K_i = I` to the tolerance of
    `dtype` (by default the stack's own); traced stacks are not checked."""
    if not isinstance(kraus, (np.ndarray, jax.Array)) or not is_concrete(kraus):
        return
    host = np.asarray(kraus).astype(np.complex128)
    total = np.einsum("aji,ajk->ik", host.conj(), host)
    err = float(np.max(np.abs(total - np.eye(host.shape[-1])), initial=0.0))
    if not err <= tolerance(np.asarray(kraus).dtype if dtype is None else dtype):  # NaN fails too
        raise ValueError(
            f"{what}: the Kraus operators are not trace preserving (max |sum_i K_i^dagger K_i - I| = "
            f"{err:.3g}); pass operators whose K^dagger K sum to the identity."
        )


class QubitChannel(AbstractChannel):
    """Any channel, from a stack of Kraus operators (complex leaves), checked completely positive and
    trace preserving (`sum_i K_i^dagger K_i = I`, to the tolerance of their dtype) when concrete.

    **Arguments:**

    - `K_list`: Kraus operators, shape `(m, 2**k, 2**k)` (or a list of `(2**k, 2**k)` matrices), in the
      order of `wires`.
    - `wires`: k wires.

    ```python
    p = 0.1
    K = [np.sqrt(1 - p) * np.eye(2), np.sqrt(p) * np.array([[0.0, 1.0], [1.0, 0.0]])]
    qfx.probs(qfx.Circuit([qfx.QubitChannel(K, wires=0)]))  # [0.9, 0.1]: a bit flip
    ```
    """

    K: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    param_names: ClassVar[tuple[str, ...]] = ("K",)

    def __init__(self, K_list: ArrayLike, wires):
        self._wires = check_wires("QubitChannel", wires, None)
        if isinstance(K_list, (list, tuple)):
            K_list = jnp.stack(
                [as_numeric(k, "QubitChannel: a Kraus operator", inexact=True) for k in K_list]
            )
        K = as_numeric(K_list, f"QubitChannel(wires={self._wires}): K_list", inexact=True)
        dim = 2 ** len(self._wires)
        if K.ndim != 3 or K.shape[1:] != (dim, dim) or K.shape[0] < 1:
            raise ValueError(
                f"QubitChannel(wires={self._wires}): expected Kraus operators of shape (m, {dim}, {dim}) for "
                f"{len(self._wires)} wire(s), got shape {K.shape}."
            )
        check_cptp(K, f"QubitChannel(wires={self._wires})")
        self.K = as_dtype(K, complex_dtype())

    @property
    def parameter_shapes(self):
        return (self.K.shape,)

    def weighted_kraus(self):
        return jnp.ones(self.K.shape[0], real_dtype()), self.K


def has_channels(ops) -> bool:
    """Whether `ops` hold a channel, in `Repeat` bodies and control-flow bodies and branches too. Read from
    the operations' types first: a flat list of thousands of gates is one pass over a set."""
    kinds = set(map(type, ops))
    if any(issubclass(k, AbstractChannel) for k in kinds):
        return True
    nesting = {k for k in kinds if not issubclass(k, AbstractGate)}  # gates hold no operation sequences
    return bool(nesting) and any(
        has_channels(inner) for op in ops if type(op) in nesting for inner in _inner_ops(op)
    )


def _inner_ops(op):
    """The operation sequences nested in `op` (a `Repeat`'s body, a loop's body, a branch)."""
    body = getattr(op, "body", None)
    if body is not None and hasattr(body, "ops"):
        yield body.ops
    for branch in getattr(op, "branches", ()) or ():
        if hasattr(branch, "ops"):
            yield branch.ops


def refuse_channels(circuit, backend: str, fn: str) -> None:
    """Raises when `circuit` holds noise channels, which `backend` (a pure-state backend) cannot run."""
    if has_channels(circuit.ops):
        raise ValueError(
            f"qfx.{fn}: the circuit holds noise channels, which {backend} cannot simulate (it simulates pure "
            "states). Use backend=qfx.DensityMatrix() (exact; the default for noisy circuits) or "
            "backend=qfx.Trajectories() with key= (one sampled trajectory per key)."
        )
