"""A circuit on `n` wires as a circuit on the `2n` wires of a vectorised density matrix.

`rho` is held as a flat array of `4**n` entries, `rho[i, j]` at index `i * 2**n + j`: the ket (row) wires
are wires `0..n-1` of a `2n`-wire state, the bra (column) wires are `n..2n-1`. Then `U rho U^dagger` is
`U` on the ket wires and `conj(U)` on the bra wires (a one-qubit gate: `U (x) conj(U)` on its two wires
at once), and a channel `sum_i K_i rho K_i^dagger` is the superoperator `sum_i K_i (x) conj(K_i)` on the
channel's ket and bra wires: both are ordinary operations on a `2n`-wire state, so the state-vector
pipeline (fusion, kernels, `Repeat` as `lax.scan`) runs them as it runs gates, and derivatives flow to the
original leaves.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from .._channels import AbstractChannel
from .._circuit import Circuit, Repeat
from .._gates import AbstractGate


class OnBra(AbstractGate):
    """`conj(U)` of a gate `base`, on its wires shifted by `shift` (the bra wires). Made here only."""

    base: AbstractGate
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return tuple(w + self.shift for w in self.base.wires)

    def matrix(self) -> Array:
        return self.base.matrix().conj()

    def diagonal(self):
        d = self.base.diagonal()
        return None if d is None else d.conj()

    def permutation(self):
        p = self.base.permutation()
        if p is None:
            return None
        perm, phases = p
        return perm, None if phases is None else phases.conj()

    def control(self):
        c = self.base.control()
        if c is None:
            return None
        controls, values, target = c
        return tuple(w + self.shift for w in controls), values, OnBra(target, self.shift)


class Conjugation(AbstractGate):
    """`rho -> U rho U^dagger` of a one-qubit gate `base` as one operation on its ket wire and its bra
    wire: the `4 x 4` matrix `U (x) conj(U)` (diagonal when `U` is). Made here only. One pass instead of
    two, and fusion multiplies it with the channels and the other one-qubit gates on that wire."""

    base: AbstractGate
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        (w,) = self.base.wires
        return (w, w + self.shift)

    def matrix(self) -> Array:
        u = self.base.matrix()
        return jnp.kron(u, u.conj())

    def diagonal(self):
        d = self.base.diagonal()
        return None if d is None else jnp.kron(d, d.conj())


class Superoperator(AbstractGate):
    """A channel's superoperator on its ket wires and its bra wires (`shift` further). Made here only;
    not unitary, but linear, which is all the pipeline needs."""

    channel: AbstractChannel
    shift: int = eqx.field(static=True)
    num_wires: ClassVar[None] = None
    shift_rules: ClassVar[None] = None

    @property
    def wires(self):
        return self.channel.wires + tuple(w + self.shift for w in self.channel.wires)

    def matrix(self) -> Array:
        return self.channel.superoperator()


def doubled(ops, n: int) -> list:
    """`ops` (gates, channels, `Repeat` blocks of them) as operations on the `2n`-wire vectorised density
    matrix."""
    out = []
    for op in ops:
        if isinstance(op, Repeat):
            out.append(Repeat(Circuit(doubled(op.body.ops, n), 2 * n), op.length))
        elif isinstance(op, AbstractChannel):
            out.append(Superoperator(op, n))
        elif isinstance(op, AbstractGate) and len(op.wires) == 1 and op.control() is None:
            out.append(Conjugation(op, n))
        elif isinstance(op, AbstractGate):
            out += [op, OnBra(op, n)]
        else:  # pragma: no cover  (the backend refuses control flow before)
            raise AssertionError(op)
    return out
