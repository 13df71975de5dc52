"""What an entry point asks a backend to compute: static descriptions of measurements.

A measurement says what to compute from a circuit's final state, not how: each backend evaluates the
kinds it supports (`AbstractBackend.evaluate`) and refuses the others with a message. Its static fields
(wires, shot counts) are part of the program's structure; the arrays it reads (observables, PRNG keys,
indices) travel beside it as `args`, so that differentiation methods can differentiate or re-key them.
`args` is always `(payload, key)`: the measurement's own arrays, and the PRNG key of the call (None
without one).
"""

from typing import ClassVar

import equinox as eqx
from jaxtyping import Array


class AbstractMeasurement(eqx.Module):
    """A measurement of a circuit's final state.

    Class attributes: `name`, the entry point that makes it (named in messages); `linear`, whether the
    value a backend returns for it is linear in `|psi><psi|` (what a parameter-shift rule needs). `post`
    turns that value into the result; it is any differentiable JAX function.
    """

    name: ClassVar[str]
    linear: ClassVar[bool] = True

    def post(self, value: Array) -> Array:
        return value


class State(AbstractMeasurement):
    """The final state vector. Not linear in `|psi><psi|`."""

    name: ClassVar[str] = "state"
    linear: ClassVar[bool] = False


class Amplitude(AbstractMeasurement):
    """One amplitude `<b|psi>`; the payload is the bitstring `b` (int32 bits, wire 0 first)."""

    name: ClassVar[str] = "amplitude"
    linear: ClassVar[bool] = False


class Probs(AbstractMeasurement):
    """The marginal probabilities of `wires` (the first most significant)."""

    name: ClassVar[str] = "probs"
    wires: tuple[int, ...] = eqx.field(static=True)


class DensityMatrix(AbstractMeasurement):
    """The reduced density matrix of `wires`."""

    name: ClassVar[str] = "density_matrix"
    wires: tuple[int, ...] = eqx.field(static=True)


class Expval(AbstractMeasurement):
    """The exact expectation value of each observable; the payload is a tuple of `LinearCombination`s."""

    name: ClassVar[str] = "expval"


class Estimate(AbstractMeasurement):
    """Shot estimates of each observable's expectation (each term measured `shots` times); the payload is
    a tuple of `LinearCombination`s, and the key draws the shots."""

    name: ClassVar[str] = "expval"
    shots: int = eqx.field(static=True)


class ProbsEstimate(AbstractMeasurement):
    """Shot estimates of the marginal probabilities of `wires`: the frequencies of `shots` outcomes (a
    multinomial draw), drawn with the key. Unbiased, so linear in `|psi><psi|` in expectation."""

    name: ClassVar[str] = "probs"
    shots: int = eqx.field(static=True)
    wires: tuple[int, ...] = eqx.field(static=True)


class Var(AbstractMeasurement):
    """The variance of each observable. A backend returns the moments `(<O^2>, <O>)`, stacked: both
    linear in `|psi><psi|`, so parameter shift differentiates them, and `post` combines them."""

    name: ClassVar[str] = "var"

    def post(self, value: Array) -> Array:
        return value[0] - value[1] ** 2


class VarEstimate(AbstractMeasurement):
    """Shot estimates of the variance of each observable; the payload is `(observables, squares)`, the
    squares `O @ O` as `LinearCombination`s. A backend returns three independent estimates, stacked, each
    from `shots` measurements of every term: `<O^2>` and `<O>` twice. `post` gives `<O^2> - <O>_1 <O>_2`,
    unbiased because the two estimates of `<O>` are independent; each entry is linear in `|psi><psi|` in
    expectation, so parameter shift (fresh keys per shifted evaluation) keeps the gradient unbiased."""

    name: ClassVar[str] = "var"
    shots: int = eqx.field(static=True)

    def post(self, value: Array) -> Array:
        return value[0] - value[1] * value[2]


class Sample(AbstractMeasurement):
    """`shots` computational-basis measurements of `wires`, as int32 bits; the key draws them. Not
    differentiable: entry points evaluate it without a differentiation method."""

    name: ClassVar[str] = "sample"
    linear: ClassVar[bool] = False
    shots: int = eqx.field(static=True)
    wires: tuple[int, ...] = eqx.field(static=True)
