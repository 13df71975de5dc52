"""The differentiation-method interface, the `Expectation` marker, and checks the methods share."""

import abc
from collections.abc import Callable

import equinox as eqx
from jaxtyping import Array, PyTree

from .._circuit import Circuit, Repeat
from .._gates import AbstractGate

# measure(final_state, args) -> array: a pure function of the final state and of `args`
# (observables, keys), which are pytrees the method may also differentiate.
Measure = Callable[[Array, PyTree], Array]


class Expectation(eqx.Module):
    """Marks a measurement whose value is linear in the density matrix `|psi><psi|`, then post-processed.

    Expectation values, probabilities, reduced density matrices and unbiased shot estimates of them are
    such measurements: as a function of one gate parameter each is a trigonometric polynomial with the
    frequencies of the gate's generator, which is what a parameter-shift rule needs. The final state
    itself is not (its frequencies are halved), nor is a variance (a product of two expectations). A
    variance is `Expectation(moments, post=lambda m, args: m[0] - m[1] ** 2)` with
    `moments = (<O^2>, <O>)`: parameter-shift differentiates the moments and JAX the post-processing.

    Methods other than `qfx.diff.ParameterShift` treat it as the plain function
    `post(fn(final_state, args), args)`.

    **Arguments:**

    - `fn`: `fn(final_state, args) -> array`, linear in `|psi><psi|`.
    - `post`: optional `post(values, args) -> array`, any differentiable JAX function.
    """

    fn: Measure = eqx.field(static=True)
    post: Callable[[Array, PyTree], Array] | None = eqx.field(static=True, default=None)

    def __call__(self, psi: Array, args: PyTree) -> Array:
        out = self.fn(psi, args)
        return out if self.post is None else self.post(out, args)


def check_batch_size(method: str, batch_size) -> None:
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ValueError(f"qfx.diff.{method}: batch_size must be a positive int or None, got {batch_size!r}.")


def check_gates_only(ops, method: str) -> None:
    """Raises on control flow and mid-circuit measurements (`qfx/_control.py`), which the methods' circuit
    traversals do not know; `qfx.expval` and friends run those circuits themselves, with JAX autodiff."""
    for op in ops:
        if isinstance(op, Repeat):
            check_gates_only(op.body.ops, method)
        elif not isinstance(op, AbstractGate):
            raise ValueError(
                f"qfx.diff.{method}() simulates gates and Repeat blocks only, not {type(op).__name__} "
                "(control flow or a mid-circuit measurement). Use qfx.state / qfx.expval / ... with the "
                "default diff=qfx.diff.Backprop(), which differentiate through them."
            )


class AbstractDiffMethod(eqx.Module):
    """How `qfx.expval`, `qfx.probs`, ... are differentiated. Passed as `diff=`; never a global switch."""

    @abc.abstractmethod
    def __call__(self, measure: Measure, circuit: Circuit, initial_state: Array, args: PyTree) -> Array:
        """Simulates `circuit` from `initial_state` and returns `measure(final_state, args)`, with
        derivatives (of any order, under any JAX transformation) given by this method."""
