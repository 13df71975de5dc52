"""Gates as Equinox modules: static wires, parameter leaves, matrices computed from the leaves.

Conventions: angles in radians; `RX(t) = exp(-i t X / 2)`; a gate's matrix is written in the order of
its own `wires`, the first wire being the most significant bit (as in PennyLane).

Besides `matrix()`, a gate may expose structure that the kernels use for fast paths:
- `diagonal()`: the diagonal of a diagonal gate, applied as an elementwise product;
- `permutation()`: `(perm, phases)` for a gate that maps basis state `perm[i]` to `i` (times `phases[i]`),
  applied as an index shuffle;
- `control()`: `(controls, values, target)` for a controlled gate, applied to a slice of the state.
"""

import abc
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike
import numpy as np

from ._checks import as_dtype, as_numeric, check_wires, host_number, is_concrete, static_bit
from ._custom_types import complex_dtype, real_dtype, tolerance
from ._memory import check_memory
from ._observables import AbstractObservable, pauli_word_matrix

# A shift rule for one parameter: terms (coefficient, shift) with df/dt = sum_k c_k f(t + s_k), or
# (coefficient, shift, multiplier) with df/dt = sum_k c_k f(a_k t + s_k).
ShiftRule = tuple[tuple[float, float] | tuple[float, float, float], ...]
# Gates whose generator has eigenvalues +-1/2 (or 0, 1): the two-term rule.
TWO_TERM: ShiftRule = ((0.5, math.pi / 2), (-0.5, -math.pi / 2))
# Generators with eigenvalues {0, +-1/2} (controlled rotations): the four-term rule.
_CP = (math.sqrt(2) + 1) / (4 * math.sqrt(2))
_CM = (math.sqrt(2) - 1) / (4 * math.sqrt(2))
FOUR_TERM: ShiftRule = (
    (_CP, math.pi / 2),
    (-_CP, -math.pi / 2),
    (-_CM, 3 * math.pi / 2),
    (_CM, -3 * math.pi / 2),
)
# A function affine in t (a channel's expectation in a strength its Kraus weights are affine in, the
# matrices fixed): df/dt = f(1) - f(0), two points inside the strength's range.
AFFINE: ShiftRule = ((1.0, 1.0, 0.0), (-1.0, 0.0, 0.0))


class _Required:
    """The default of a gate's required arguments: leaving one out raises an error that names the gate
    and its signature (Python's own names the private base class whose `__init__` it is)."""

    __slots__ = ()

    def __repr__(self):
        return "<required>"


_REQUIRED: Any = _Required()


def _require(gate: "AbstractGate", **arguments) -> None:
    """Raises a `TypeError` naming the gate when one of `arguments` (all of its `__init__`'s, in order) was
    left out."""
    missing = [k for k, v in arguments.items() if v is _REQUIRED]
    if not missing:
        return
    name = type(gate).__name__
    wires = getattr(gate, "num_wires", None)
    what = {
        "wires": "the wires it acts on: "
        + ("an int" if wires == 1 else f"{wires} ints" if wires else "a sequence of ints"),
        "controls": "the control wires",
        "base": "the gate it wraps",
        "U": "the unitary matrix",
        "pauli_word": "a string over 'IXYZ', one letter per wire",
    }.get(missing[0], "an angle in radians")
    raise TypeError(
        f"qfx.{name}: missing the argument {missing[0]!r} ({what}); call it as "
        f"qfx.{name}({', '.join(arguments)})."
    )


def _angle(name: str, field: str, value) -> Array:
    """Converts a gate parameter to a real scalar array of the default float dtype."""
    dtype = getattr(value, "dtype", None)
    if isinstance(value, complex) or (dtype is not None and jnp.issubdtype(dtype, jnp.complexfloating)):
        raise TypeError(f"{name}: the angle {field} must be real, got the complex value {value!r}.")
    value = as_numeric(value, f"{name}: the angle {field}", inexact=True)
    if value.shape != ():
        raise ValueError(
            f"{name}: the angle {field} must be a scalar, got shape {value.shape}. For a batch of "
            "circuits, build them with eqx.filter_vmap or map qfx functions with jax.vmap."
        )
    return as_dtype(value, real_dtype())


def _c(x) -> Array:
    return jnp.asarray(x, dtype=complex_dtype())


def _phase(t: Array) -> Array:
    """exp(i t) for a real array t, in the default complex dtype."""
    return jnp.exp(1j * jnp.asarray(t, complex_dtype()))


def _cos_sin(t: Array) -> tuple[Array, Array]:
    return _c(jnp.cos(t / 2)), _c(jnp.sin(t / 2))


def _matrix2(a: Array, b: Array, c: Array, d: Array) -> Array:
    """`[[a, b], [c, d]]` from scalar arrays (which may be traced)."""
    return jnp.stack([jnp.stack([a, b]), jnp.stack([c, d])])


def _block_controlled(target: Array, num_controls: int = 1) -> Array:
    """The matrix of a gate controlled (on |1...1>) by `num_controls` leading wires."""
    dim = target.shape[0] * 2**num_controls
    eye = jnp.eye(dim, dtype=target.dtype)
    return eye.at[dim - target.shape[0] :, dim - target.shape[0] :].set(target)


class AbstractOperation(eqx.Module):
    """Anything a circuit holds: gates, and blocks such as `Repeat`."""

    # Plain attribute reads. Equinox's `Module.__getattribute__` is a Python hook (it turns bound methods
    # into pytrees, which qfx never hands to a JAX transform) that runs on every attribute read, twice in
    # each module's flatten, paid by every jitted call that takes a circuit: on small circuits a sizeable
    # part of the whole call (measurements: `qfx/_statevector/README.md`).
    __getattribute__ = object.__getattribute__

    @property
    @abc.abstractmethod
    def wires(self) -> tuple[int, ...]:
        """The wires the operation acts on."""


class AbstractGate(AbstractOperation):
    """A unitary on `len(wires)` qubits. Parameters are array leaves, wires are static."""

    num_wires: ClassVar[int | None]
    param_names: ClassVar[tuple[str, ...]] = ()
    # The shape of each parameter in one circuit where it is known (() for an angle), checked before a circuit
    # runs, so that a batch of circuits passed unmapped gets a clear error. None (a user's gate): no check.
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...] | None] = None
    # One shift rule per parameter, or None where no rule is known (e.g. QubitUnitary).
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = ()
    self_inverse: ClassVar[bool] = False

    @abc.abstractmethod
    def matrix(self) -> Array:
        """The `(2**k, 2**k)` unitary, in the order of `self.wires`."""

    def diagonal(self) -> Array | None:
        """The diagonal of the matrix when the gate is diagonal, else None."""
        return None

    def permutation(self) -> tuple[tuple[int, ...], Array | None] | None:
        """`(perm, phases)` with `out[i] = phases[i] * in[perm[i]]` for permutation-like gates."""
        return None

    def control(self) -> "tuple[tuple[int, ...], tuple[int, ...], AbstractGate] | None":
        """`(controls, control_values, target)` for gates that act on a slice of the state."""
        return None

    @property
    def parameters(self) -> tuple[Array, ...]:
        return tuple(getattr(self, name) for name in self.param_names)

    @property
    def name(self) -> str:
        return type(self).__name__

    def adjoint(self) -> "AbstractGate":
        """The inverse gate. It keeps this gate's parameter leaves, so gradients keep their shape."""
        return self if self.self_inverse else Adjoint(self)

    def __repr__(self):
        params = []
        for p in self.parameters:
            value = host_number(p)
            if value is not None:
                params.append(f"{value:.4g}")
            elif hasattr(p, "shape") and hasattr(p, "dtype"):
                kind = "float0" if p.dtype == jax.dtypes.float0 else type(p).__name__  # float0: allow_int
                params.append(f"{kind}{tuple(p.shape)}")
            else:  # a leaf of a tree that is not simulated (see host_number)
                params.append(repr(p))
        wires = self.wires[0] if len(self.wires) == 1 else self.wires
        return f"{self.name}({', '.join(params + [f'wires={wires}'])})"


class _AbstractFixed(AbstractGate):
    """A gate with no parameters."""

    _wires: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, wires=_REQUIRED):
        _require(self, wires=wires)
        self._wires = check_wires(type(self).__name__, wires, self.num_wires)

    @property
    def wires(self):
        return self._wires


class _AbstractAngles(AbstractGate):
    """A gate whose leaves are the real angles named in `param_names`, on static wires.

    Each gate declares its own angle fields, followed by `_wires`: the order of the fields is the order of
    the leaves and of the static values in the treedef (serialised circuits and `eqx.tree_at` rely on both),
    and fields declared here would come before the angles.
    """

    _wires: eqx.AbstractVar[tuple[int, ...]]

    def _init_angles(self, wires, *angles) -> None:
        """Sets `_wires`, then each angle in `param_names` order: the order bad arguments are reported in."""
        name = type(self).__name__
        self._wires = check_wires(name, wires, self.num_wires)
        for field, value in zip(self.param_names, angles, strict=True):
            setattr(self, field, _angle(name, field, value))

    @property
    def wires(self):
        return self._wires


class _AbstractOneParameter(_AbstractAngles):
    """A gate with one angle `theta`."""

    theta: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("theta",)
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),)
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (TWO_TERM,)

    def __init__(self, theta: ArrayLike = _REQUIRED, wires=_REQUIRED):
        _require(self, theta=theta, wires=wires)
        self._init_angles(wires, theta)


# --- one-qubit gates without parameters ---------------------------------------------------------

_SQ2 = 1 / math.sqrt(2)


class Identity(_AbstractFixed, AbstractObservable):
    """The identity on one wire."""

    pauli_letter: ClassVar[str] = "I"
    num_wires: ClassVar[int] = 1
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return _c(np.eye(2))

    def diagonal(self):
        return _c(np.ones(2))


class PauliX(_AbstractFixed, AbstractObservable):
    """The Pauli X (NOT) gate. Also an observable: `qfx.X(0) @ qfx.Z(1)`."""

    pauli_letter: ClassVar[str] = "X"
    num_wires: ClassVar[int] = 1
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return _c([[0, 1], [1, 0]])

    def permutation(self):
        return (1, 0), None


class PauliY(_AbstractFixed, AbstractObservable):
    """The Pauli Y gate. Also an observable."""

    pauli_letter: ClassVar[str] = "Y"
    num_wires: ClassVar[int] = 1
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return _c([[0, -1j], [1j, 0]])

    def permutation(self):
        return (1, 0), _c([-1j, 1j])


class PauliZ(_AbstractFixed, AbstractObservable):
    """The Pauli Z gate. Also an observable."""

    pauli_letter: ClassVar[str] = "Z"
    num_wires: ClassVar[int] = 1
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return _c([[1, 0], [0, -1]])

    def diagonal(self):
        return _c([1, -1])


class Hadamard(_AbstractFixed):
    """The Hadamard gate."""

    num_wires: ClassVar[int] = 1
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return _c([[_SQ2, _SQ2], [_SQ2, -_SQ2]])


class S(_AbstractFixed):
    """The phase gate diag(1, i). Its inverse is `qfx.Adjoint(qfx.S(w))`."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return _c([1, 1j])


class T(_AbstractFixed):
    """The T gate diag(1, exp(i pi/4)). Its inverse is `qfx.Adjoint(qfx.T(w))`."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return _c([1, np.exp(1j * np.pi / 4)])


class SX(_AbstractFixed):
    """The square root of X."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        return _c([[0.5 + 0.5j, 0.5 - 0.5j], [0.5 - 0.5j, 0.5 + 0.5j]])


# --- one-qubit rotations ----------------------------------------------------------------------


class RX(_AbstractOneParameter):
    """`RX(theta) = exp(-i theta X / 2)`."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        c, s = _cos_sin(self.theta)
        return _matrix2(c, -1j * s, -1j * s, c)


class RY(_AbstractOneParameter):
    """`RY(theta) = exp(-i theta Y / 2)`."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        c, s = _cos_sin(self.theta)
        return _matrix2(c, -s, s, c)


class RZ(_AbstractOneParameter):
    """`RZ(theta) = exp(-i theta Z / 2)`."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return jnp.stack([_phase(-self.theta / 2), _phase(self.theta / 2)])


class _AbstractPhaseShift(_AbstractOneParameter):
    """`diag(1, exp(i theta))`, under two names (PennyLane has both)."""

    num_wires: ClassVar[int] = 1

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return jnp.stack([_c(1), _phase(self.theta)])


class PhaseShift(_AbstractPhaseShift):
    """`PhaseShift(theta) = diag(1, exp(i theta))`."""


class U1(_AbstractPhaseShift):
    """`U1(theta) = diag(1, exp(i theta))`, the same matrix as `PhaseShift`."""


class _AbstractRot(_AbstractAngles):
    """The angles of `Rot` and of `CRot`, which applies it to its last wire."""

    phi: Array
    theta: Array
    omega: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    param_names: ClassVar[tuple[str, ...]] = ("phi", "theta", "omega")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),) * 3

    def __init__(self, phi=_REQUIRED, theta=_REQUIRED, omega=_REQUIRED, wires=_REQUIRED):
        _require(self, phi=phi, theta=theta, omega=omega, wires=wires)
        self._init_angles(wires, phi, theta, omega)


class Rot(_AbstractRot):
    """`Rot(phi, theta, omega) = RZ(omega) RY(theta) RZ(phi)`."""

    num_wires: ClassVar[int] = 1
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (TWO_TERM,) * 3

    def matrix(self):
        c, s = _cos_sin(self.theta)
        p, m = (self.phi + self.omega) / 2, (self.phi - self.omega) / 2
        return _matrix2(_phase(-p) * c, -_phase(m) * s, _phase(-m) * s, _phase(p) * c)


def _u_matrix(c: Array, s: Array, phi: Array, delta: Array) -> Array:
    """`[[c, -e^{i delta} s], [e^{i phi} s, e^{i (phi + delta)} c]]`: U3's matrix, and U2's (U3 at theta =
    pi/2) with `c = s = 1/sqrt(2)` given exactly, not rounded from cos(pi/4)."""
    return _matrix2(c, -_phase(delta) * s, _phase(phi) * s, _phase(phi + delta) * c)


class U2(_AbstractAngles):
    """`U2(phi, delta) = [[1, -e^{i delta}], [e^{i phi}, e^{i (phi + delta)}]] / sqrt(2)`."""

    phi: Array
    delta: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[int] = 1
    param_names: ClassVar[tuple[str, ...]] = ("phi", "delta")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),) * 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (TWO_TERM,) * 2

    def __init__(self, phi=_REQUIRED, delta=_REQUIRED, wires=_REQUIRED):
        _require(self, phi=phi, delta=delta, wires=wires)
        self._init_angles(wires, phi, delta)

    def matrix(self):
        return _u_matrix(_c(_SQ2), _c(_SQ2), self.phi, self.delta)


class U3(_AbstractAngles):
    """`U3(theta, phi, delta) = [[c, -e^{i delta} s], [e^{i phi} s, e^{i (phi + delta)} c]]`,
    with `c = cos(theta/2)`, `s = sin(theta/2)`."""

    theta: Array
    phi: Array
    delta: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[int] = 1
    param_names: ClassVar[tuple[str, ...]] = ("theta", "phi", "delta")
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),) * 3
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (TWO_TERM,) * 3

    def __init__(self, theta=_REQUIRED, phi=_REQUIRED, delta=_REQUIRED, wires=_REQUIRED):
        _require(self, theta=theta, phi=phi, delta=delta, wires=wires)
        self._init_angles(wires, theta, phi, delta)

    def matrix(self):
        return _u_matrix(*_cos_sin(self.theta), self.phi, self.delta)


# --- two- and three-qubit gates without parameters --------------------------------------------


def _perm_matrix(perm, phases=None) -> Array:
    dim = len(perm)
    m = np.zeros((dim, dim), dtype=np.complex128)
    ph = np.ones(dim) if phases is None else phases
    for i, j in enumerate(perm):
        m[i, j] = ph[i]
    return _c(m)


class _AbstractPermutation(_AbstractFixed):
    """A gate that maps basis state `_perm[i]` to `i`, times `_phases[i]` (None: all 1)."""

    _perm: eqx.AbstractClassVar[tuple[int, ...]]
    _phases: ClassVar[tuple[complex, ...] | None] = None

    def matrix(self):
        return _perm_matrix(self._perm, None if self._phases is None else np.array(self._phases))

    def permutation(self):
        return self._perm, None if self._phases is None else _c(self._phases)


class CNOT(_AbstractPermutation):
    """Controlled NOT; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    self_inverse: ClassVar[bool] = True
    _perm: ClassVar[tuple[int, ...]] = (0, 1, 3, 2)


class CY(_AbstractPermutation):
    """Controlled Y; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    self_inverse: ClassVar[bool] = True
    _perm: ClassVar[tuple[int, ...]] = (0, 1, 3, 2)
    _phases: ClassVar[tuple[complex, ...]] = (1, 1, -1j, 1j)


class CZ(_AbstractFixed):
    """Controlled Z."""

    num_wires: ClassVar[int] = 2
    self_inverse: ClassVar[bool] = True

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return _c([1, 1, 1, -1])


class SWAP(_AbstractPermutation):
    """Swaps two wires."""

    num_wires: ClassVar[int] = 2
    self_inverse: ClassVar[bool] = True
    _perm: ClassVar[tuple[int, ...]] = (0, 2, 1, 3)


class ISWAP(_AbstractPermutation):
    """Swaps two wires and multiplies |01> and |10> by i."""

    num_wires: ClassVar[int] = 2
    _perm: ClassVar[tuple[int, ...]] = (0, 2, 1, 3)
    _phases: ClassVar[tuple[complex, ...]] = (1, 1j, 1j, 1)


class Toffoli(_AbstractPermutation):
    """Doubly controlled NOT; `wires=(control, control, target)`."""

    num_wires: ClassVar[int] = 3
    self_inverse: ClassVar[bool] = True
    _perm: ClassVar[tuple[int, ...]] = (0, 1, 2, 3, 4, 5, 7, 6)


class CSWAP(_AbstractPermutation):
    """Controlled SWAP (Fredkin); `wires=(control, a, b)`."""

    num_wires: ClassVar[int] = 3
    self_inverse: ClassVar[bool] = True
    _perm: ClassVar[tuple[int, ...]] = (0, 1, 2, 3, 4, 6, 5, 7)


# --- two-qubit parametric gates ---------------------------------------------------------------


class CRX(_AbstractOneParameter):
    """Controlled RX; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        return _block_controlled(RX(self.theta, 0).matrix())


class CRY(_AbstractOneParameter):
    """Controlled RY; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        return _block_controlled(RY(self.theta, 0).matrix())


class CRZ(_AbstractOneParameter):
    """Controlled RZ; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return jnp.concatenate([_c([1, 1]), RZ(self.theta, 0).diagonal()])


class ControlledPhaseShift(_AbstractOneParameter):
    """`diag(1, 1, 1, exp(i theta))`. Its generator |11><11| has eigenvalues 0 and 1: two-term rule."""

    num_wires: ClassVar[int] = 2

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return jnp.concatenate([_c([1, 1, 1]), _phase(self.theta)[None]])


class CRot(_AbstractRot):
    """Controlled `Rot(phi, theta, omega)`; `wires=(control, target)`."""

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,) * 3

    def matrix(self):
        return _block_controlled(Rot(self.phi, self.theta, self.omega, 0).matrix())


def _ising_matrix(theta: Array, corner: complex) -> Array:
    """`exp(-i theta P⊗P / 2)` for P = X (`corner=-1j`) or Y (`corner=1j`): as Y⊗Y = -X⊗X on |00> and
    |11>, the two differ only in the sign of their corners."""
    c, s = _cos_sin(theta)
    z = jnp.zeros_like(c)
    return jnp.stack(
        [
            jnp.stack([c, z, z, corner * s]),
            jnp.stack([z, c, -1j * s, z]),
            jnp.stack([z, -1j * s, c, z]),
            jnp.stack([corner * s, z, z, c]),
        ]
    )


class IsingXX(_AbstractOneParameter):
    """`IsingXX(theta) = exp(-i theta X⊗X / 2)`."""

    num_wires: ClassVar[int] = 2

    def matrix(self):
        return _ising_matrix(self.theta, -1j)


class IsingYY(_AbstractOneParameter):
    """`IsingYY(theta) = exp(-i theta Y⊗Y / 2)`."""

    num_wires: ClassVar[int] = 2

    def matrix(self):
        return _ising_matrix(self.theta, 1j)


class IsingZZ(_AbstractOneParameter):
    """`IsingZZ(theta) = exp(-i theta Z⊗Z / 2)`."""

    num_wires: ClassVar[int] = 2

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        a, b = _phase(-self.theta / 2), _phase(self.theta / 2)
        return jnp.stack([a, b, b, a])


class IsingXY(_AbstractOneParameter):
    """`IsingXY(theta) = exp(i theta (X⊗X + Y⊗Y) / 4)`."""

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        c, s = _cos_sin(self.theta)
        o, z = jnp.ones_like(c), jnp.zeros_like(c)
        return jnp.stack(
            [
                jnp.stack([o, z, z, z]),
                jnp.stack([z, c, 1j * s, z]),
                jnp.stack([z, 1j * s, c, z]),
                jnp.stack([z, z, z, o]),
            ]
        )


# --- fermionic excitations (quantum chemistry) ------------------------------------------------


class SingleExcitation(_AbstractOneParameter):
    """A Givens rotation of |01> and |10>: `|01> -> cos(phi/2)|01> + sin(phi/2)|10>`, `|10> -> cos(phi/2)|10>
    - sin(phi/2)|01>`, |00> and |11> unchanged (PennyLane's `SingleExcitation`, a fermionic excitation
    between two spin orbitals in the Jordan-Wigner encoding).

    Its generator `(Y⊗X - X⊗Y) / 4` has eigenvalues {0, 0, +-1/2}: the four-term shift rule.

    ```python
    circ = qfx.Circuit([qfx.X(0), qfx.SingleExcitation(0.3, wires=(0, 1))])
    qfx.probs(circ)  # [0, sin(0.15)**2, cos(0.15)**2, 0]
    ```
    """

    num_wires: ClassVar[int] = 2
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        c, s = _cos_sin(self.theta)
        o, z = jnp.ones_like(c), jnp.zeros_like(c)
        return jnp.stack(
            [
                jnp.stack([o, z, z, z]),
                jnp.stack([z, c, -s, z]),
                jnp.stack([z, s, c, z]),
                jnp.stack([z, z, z, o]),
            ]
        )


class DoubleExcitation(_AbstractOneParameter):
    """A Givens rotation of |0011> and |1100> on four wires: `|0011> -> cos(phi/2)|0011> +
    sin(phi/2)|1100>`, `|1100> -> cos(phi/2)|1100> - sin(phi/2)|0011>`, the 14 other basis states unchanged
    (PennyLane's `DoubleExcitation`: in the Jordan-Wigner encoding, two electrons moving between the
    orbital pairs `wires[2:]` and `wires[:2]`).

    Its generator has eigenvalues {0, +-1/2}: the four-term shift rule.

    ```python
    circ = qfx.Circuit([qfx.X(2), qfx.X(3), qfx.DoubleExcitation(0.3, wires=(0, 1, 2, 3))])
    qfx.amplitude(circ, "1100")  # sin(0.15)
    ```
    """

    num_wires: ClassVar[int] = 4
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (FOUR_TERM,)

    def matrix(self):
        c, s = _cos_sin(self.theta)
        eye = jnp.eye(16, dtype=c.dtype)
        rows, cols = np.array([3, 3, 12, 12]), np.array([3, 12, 3, 12])
        return eye.at[rows, cols].set(jnp.stack([c, -s, s, c]))


# --- gates on any number of wires -------------------------------------------------------------


def _z_eigenvalues(word: str) -> Array:
    """The eigenvalues (+-1) of a word of I and Z letters, in basis order, as the default real dtype.

    By Kronecker products: 2**k entries, with no k x 2**k table of bits (3.2 GB at 24 wires)."""
    z = np.ones(1, real_dtype())
    for letter in word:
        z = np.kron(z, np.asarray([1, -1] if letter == "Z" else [1, 1], z.dtype))
    return jnp.asarray(z)


class MultiRZ(_AbstractOneParameter):
    """`MultiRZ(theta) = exp(-i theta Z⊗...⊗Z / 2)` on any number of wires."""

    num_wires: ClassVar[None] = None

    def matrix(self):
        return jnp.diag(self.diagonal())

    def diagonal(self):
        return _phase(-self.theta / 2 * _z_eigenvalues("Z" * len(self.wires)))


class PauliRot(_AbstractAngles):
    """`PauliRot(theta, "XYZ", wires) = exp(-i theta P / 2)` for a Pauli word P on `wires`."""

    theta: Array
    pauli_word: str = eqx.field(static=True)
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    param_names: ClassVar[tuple[str, ...]] = ("theta",)
    parameter_shapes: ClassVar[tuple[tuple[int, ...], ...]] = ((),)
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = (TWO_TERM,)

    def __init__(self, theta=_REQUIRED, pauli_word: str = _REQUIRED, wires=_REQUIRED):
        _require(self, theta=theta, pauli_word=pauli_word, wires=wires)
        self._wires = check_wires("PauliRot", wires, None)
        if not isinstance(pauli_word, str) or set(pauli_word) - set("IXYZ"):
            raise ValueError(f"PauliRot: pauli_word must be a string over 'IXYZ', got {pauli_word!r}.")
        if len(pauli_word) != len(self._wires):
            raise ValueError(
                f"PauliRot: pauli_word {pauli_word!r} has {len(pauli_word)} letters but "
                f"wires={self._wires} has {len(self._wires)}; give one letter per wire."
            )
        self.pauli_word = str(pauli_word)  # not a np.str_, which Equinox takes for an array in a static field
        self.theta = _angle("PauliRot", "theta", theta)

    def matrix(self):
        c, s = _cos_sin(self.theta)
        p = _c(pauli_word_matrix(self.pauli_word))
        return c * jnp.eye(p.shape[0], dtype=p.dtype) - 1j * s * p

    def diagonal(self):
        if set(self.pauli_word) <= {"I", "Z"}:  # diagonal: no matrix
            return _phase(-self.theta / 2 * _z_eigenvalues(self.pauli_word))
        return None

    def __repr__(self):
        return super().__repr__().replace("PauliRot(", f"PauliRot({self.pauli_word!r}, ", 1)


def check_unitary(U, what: str, dtype=None) -> None:
    """Raises unless the matrix (or stack of matrices) `U` is unitary to the tolerance of `dtype` (by
    default U's own: the dtype it was computed in); only when `U` is a concrete array (under jit, JAX
    operations on a constant are traced; shape-only structs have no values)."""
    if not isinstance(U, (np.ndarray, jax.Array)) or not is_concrete(U):
        return
    host = np.asarray(U).astype(np.complex128)
    eye = np.eye(host.shape[-1])
    err = float(np.max(np.abs(np.swapaxes(host.conj(), -1, -2) @ host - eye), initial=0.0))
    if not err <= tolerance(np.asarray(U).dtype if dtype is None else dtype):  # NaN fails too
        raise ValueError(
            f"{what}: the matrix is not unitary (max |U^dagger U - I| = {err:.3g}); pass a unitary matrix."
        )


class QubitUnitary(AbstractGate):
    """Any k-qubit unitary; its entries are leaves (differentiable). Checked for unitarity when concrete."""

    U: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    param_names: ClassVar[tuple[str, ...]] = ("U",)
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = None

    def __init__(self, U: ArrayLike = _REQUIRED, wires=_REQUIRED):
        _require(self, U=U, wires=wires)
        self._wires = check_wires("QubitUnitary", wires, None)
        U = as_numeric(U, f"QubitUnitary(wires={self._wires}): the matrix U", inexact=True)
        dim = 2 ** len(self._wires)
        if U.shape != (dim, dim):
            raise ValueError(
                f"QubitUnitary(wires={self._wires}): expected a ({dim}, {dim}) matrix for "
                f"{len(self._wires)} wire(s), got shape {U.shape}."
            )
        check_unitary(U, f"QubitUnitary(wires={self._wires})")
        self.U = as_dtype(U, complex_dtype())

    @property
    def wires(self):
        return self._wires

    @property
    def parameter_shapes(self):
        return ((2 ** len(self._wires),) * 2,)

    def matrix(self):
        return self.U


class StatePrep(AbstractGate):
    """Prepares `state` on `wires` from |0...0>: a unitary whose first column is `state`.

    It is a gate like any other, so it stands anywhere in a circuit, works with every backend and
    differentiation method, and `jax.grad` reaches the amplitudes (a leaf) and whatever they were computed
    from. Its matrix is fixed by a formula: with `state[0] = r e^{i a}` (a = 0 where r = 0),
    `u = e^{-i a} state`, `w = |0> + u`, it is `-e^{i a} (I - w w^dagger / (1 + r))`, a reflection that maps
    |0...0> to `state` exactly; on any other input it is that reflection. Place it where its wires hold
    |0...0> (as PennyLane's `StatePrep` goes first) unless you want the reflection. For a state on every
    wire, `initial_state=` of the measurement does the same without a matrix.

    **Arguments:**

    - `state`: `2**len(wires)` amplitudes (real or complex), wire `wires[0]` the most significant bit.
    - `wires`: the wires it prepares.
    - `pad_with`: if given, a shorter `state` is padded with this value up to `2**len(wires)` entries.
    - `normalize`: divide by the norm (after padding). Otherwise the norm must be 1: checked at once
      when concrete, at run time (`eqx.error_if`) when traced.

    The matrix is dense, `4**len(wires)` entries: meant for a few wires (refused where it cannot fit in
    memory). Parameter shift has no rule for the amplitudes (use `Backprop`, `Adjoint` or `Auto`).

    ```python
    psi = jnp.array([0.6, 0.0, 0.0, 0.8])
    circ = qfx.Circuit([qfx.StatePrep(psi, wires=(0, 1))])
    qfx.state(circ)  # psi
    ```
    """

    state: Array
    _wires: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    param_names: ClassVar[tuple[str, ...]] = ("state",)
    shift_rules: ClassVar[tuple[ShiftRule, ...] | None] = None

    def __init__(self, state: ArrayLike, wires, *, pad_with: complex | None = None, normalize: bool = False):
        self._wires = check_wires("StatePrep", wires, None)
        name = f"StatePrep(wires={self._wires})"
        k = len(self._wires)
        dim = 2**k
        state = as_numeric(state, f"{name}: the state", inexact=True)
        if state.ndim != 1:
            raise ValueError(
                f"{name}: expected a vector of {dim} amplitudes, got shape {state.shape}. For a batch, build "
                "the circuits with eqx.filter_vmap or map qfx functions with jax.vmap."
            )
        if state.shape[0] > dim or (state.shape[0] < dim and pad_with is None):
            more = "" if state.shape[0] > dim else "; pass pad_with=0.0 to pad it"
            raise ValueError(
                f"{name}: expected {dim} amplitudes for {k} wire(s), got {state.shape[0]}{more}."
            )
        check_memory(
            4**k,
            f"{name}: its dense matrix ({dim} x {dim})",
            "Prepare fewer wires, or pass the full state as initial_state= to the measurement.",
        )
        tol = tolerance(state.dtype)  # the precision the amplitudes were computed in (see tolerance)
        state = as_dtype(state, complex_dtype())
        if state.shape[0] < dim:
            fill = as_numeric(pad_with, f"{name}: pad_with", inexact=True)
            state = jnp.concatenate([state, jnp.full((dim - state.shape[0],), fill, complex_dtype())])
        if is_concrete(state):  # a constant inside a jit trace too: checked now (see as_numeric)
            with jax.ensure_compile_time_eval():
                norm2 = jnp.sum(jnp.real(state * state.conj()))
        else:
            norm2 = jnp.sum(jnp.real(state * state.conj()))
        if normalize:
            if is_concrete(norm2) and not float(norm2) > 0:
                raise ValueError(f"{name}: normalize=True needs a state with a nonzero norm.")
            state = state / jnp.sqrt(norm2).astype(state.dtype)
        elif is_concrete(norm2):
            if not abs(float(norm2) - 1) <= tol:  # NaN fails too
                raise ValueError(
                    f"{name}: the state is not normalised (squared norm {float(norm2):.6g}); pass "
                    "normalize=True or a vector of norm 1."
                )
        else:
            bad = ~(jnp.abs(norm2 - 1) <= tol)
            state = eqx.error_if(state, bad, f"{name}: the state is not normalised; pass normalize=True.")
        self.state = state

    @property
    def wires(self):
        return self._wires

    @property
    def parameter_shapes(self):
        return ((2 ** len(self._wires),),)

    def matrix(self):
        psi = self.state
        first = psi[0]
        r2 = jnp.real(first * first.conj())
        # Double `where`s: at state[0] = 0 the phase is set to 1 with a finite (zero) derivative.
        nonzero = r2 > 0
        r = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, r2, 1)), 0)
        phase = jnp.where(nonzero, first / jnp.where(nonzero, r, 1).astype(psi.dtype), 1)
        w = (phase.conj() * psi).at[0].add(1)
        reflection = jnp.eye(psi.shape[0], dtype=psi.dtype) - jnp.outer(w, w.conj()) / (1 + r).astype(
            psi.dtype
        )
        # Column 0 is `state` itself (equal up to rounding): its derivative then is exact, with no phase.
        return (-phase * reflection).at[:, 0].set(psi)


class MultiControlledX(AbstractGate):
    """X on the last of `wires`, controlled by the others on `control_values` (default all 1)."""

    _wires: tuple[int, ...] = eqx.field(static=True)
    control_values: tuple[int, ...] = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    self_inverse: ClassVar[bool] = True

    def __init__(self, wires=_REQUIRED, control_values=None):
        _require(self, wires=wires)
        self._wires = check_wires("MultiControlledX", wires, None)
        if len(self._wires) < 2:
            raise ValueError(f"MultiControlledX(wires={self._wires}): needs a control and a target.")
        self.control_values = _check_control_values("MultiControlledX", control_values, len(self._wires) - 1)

    @property
    def wires(self):
        return self._wires

    def control(self):
        return self._wires[:-1], self.control_values, PauliX(self._wires[-1])

    def matrix(self):
        return _controlled_matrix(self.control_values, PauliX(0).matrix())


def _check_control_values(name, values, num_controls) -> tuple[int, ...]:
    if values is None:
        return (1,) * num_controls
    if not isinstance(values, (list, tuple)):  # one value, or an array of them
        values = (values,) if np.ndim(values) == 0 else tuple(values)
    bits = [static_bit(v) for v in values]
    if len(bits) != num_controls or None in bits:
        raise ValueError(
            f"{name}: control_values must be {num_controls} static values in {{0, 1}} (not traced: they "
            f"choose the kernel), got {values!r}."
        )
    return tuple(bits)


def _controlled_matrix(values: tuple[int, ...], target: Array) -> Array:
    """The full matrix of `target` controlled by wires set to `values` (controls first)."""
    tdim = target.shape[0]
    dim = tdim * 2 ** len(values)
    start = int("".join(map(str, values)), 2) * tdim if values else 0
    eye = jnp.eye(dim, dtype=target.dtype)
    return eye.at[start : start + tdim, start : start + tdim].set(target)


# --- wrappers ---------------------------------------------------------------------------------


class _AbstractWrapper(AbstractGate):
    """A gate made from another, `base`, whose parameters (leaves and shapes) it has as its own."""

    base: AbstractGate
    num_wires: ClassVar[None] = None

    def _check_base(self, base) -> AbstractGate:
        if not isinstance(base, AbstractGate):
            raise TypeError(f"{type(self).__name__}: expected a gate, got {type(base).__name__}.")
        return base

    @property
    def parameters(self):
        return self.base.parameters

    @property
    def parameter_shapes(self):
        return self.base.parameter_shapes


class Adjoint(_AbstractWrapper):
    """The inverse of a gate. `Adjoint(S(0))` is S-dagger. Keeps the base gate's parameter leaves."""

    def __init__(self, base: AbstractGate = _REQUIRED):
        _require(self, base=base)
        self.base = self._check_base(base)

    @property
    def wires(self):
        return self.base.wires

    @property
    def name(self):
        return f"Adjoint({self.base.name})"

    @property
    def shift_rules(self):
        # d/dt f(-t) flips the sign of every shift and every coefficient: the rule is unchanged
        # for the antisymmetric rules used here.
        return self.base.shift_rules

    def adjoint(self):
        return self.base

    def matrix(self):
        return self.base.matrix().conj().T

    def diagonal(self):
        d = self.base.diagonal()
        return None if d is None else d.conj()

    def permutation(self):
        p = self.base.permutation()
        if p is None:
            return None
        perm, phases = p
        inv = [0] * len(perm)
        for i, j in enumerate(perm):
            inv[j] = i
        # U = P D in the sense out[i] = ph[i] in[perm[i]]; the inverse maps
        # out[j] = conj(ph[inv[j]]) in[inv[j]].
        return tuple(inv), None if phases is None else phases.conj()[jnp.asarray(inv)]

    def control(self):
        c = self.base.control()
        return None if c is None else (c[0], c[1], c[2].adjoint())

    def __repr__(self):
        return f"Adjoint({self.base!r})"


class Controlled(_AbstractWrapper):
    """`base` applied where the `controls` wires hold `control_values` (default all 1).

    The wires are `controls + base.wires`. Applied to a slice of the state, so many controls stay cheap.
    """

    controls: tuple[int, ...] = eqx.field(static=True)
    control_values: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, base: AbstractGate = _REQUIRED, controls=_REQUIRED, control_values=None):
        _require(self, base=base, controls=controls)
        self._check_base(base)
        controls = check_wires("Controlled", controls, None)
        overlap = set(controls) & set(base.wires)
        if overlap:
            raise ValueError(
                f"Controlled: control wires {controls} overlap the wires {base.wires} of "
                f"{base.name} on {sorted(overlap)}; controls must be other wires."
            )
        self.base = base
        self.controls = controls
        self.control_values = _check_control_values("Controlled", control_values, len(controls))

    @property
    def wires(self):
        return self.controls + self.base.wires

    @property
    def name(self):
        return f"C({self.base.name})"

    @property
    def shift_rules(self):
        # Controlling adds the eigenvalue 0 to the generator's: a two-term generator (eigenvalues +-1/2, or
        # 0 and 1) becomes one with differences in {1/2, 1}, the four-term rule's; a four-term one stays so.
        rules = self.base.shift_rules
        if rules is None or any(r not in (TWO_TERM, FOUR_TERM) for r in rules):
            return None
        return (FOUR_TERM,) * len(rules)

    def adjoint(self):
        return Controlled(self.base.adjoint(), self.controls, self.control_values)

    def control(self):
        return self.controls, self.control_values, self.base

    def matrix(self):
        return _controlled_matrix(self.control_values, self.base.matrix())

    def __repr__(self):
        return f"Controlled({self.base!r}, controls={self.controls}, control_values={self.control_values})"


# PennyLane's short names.
X = PauliX
Y = PauliY
Z = PauliZ
H = Hadamard
I = Identity  # noqa: E741
