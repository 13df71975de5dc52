"""Control flow and mid-circuit measurements on the density matrix.

The carry is a classical-quantum state, an array of shape `(2**R, 4**n)`: one (unnormalised) density matrix
per record of the `R` outcomes that a condition reads (record bit 0 most significant). An outcome that
nothing reads is not recorded: its measurement dephases the density matrix on that wire (the sum over
outcomes of the projected states), which is the same state as keeping the outcome and forgetting it, at a
`2**R`-th of the memory. Outcomes whose reads are over by the time another is measured share a bit
(`_registers`). A BB84 program that measures 8 qubits and reads none of the outcomes keeps one
density matrix, where one per record would be 256.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._control import MidMeasure, Program, capped_while, evaluate
from .._custom_types import real_dtype
from .._memory import check_memory
from .._statevector import run
from ._doubled import doubled
from ._pauli import apply_transfer, from_pauli, run_pauli


def _registers(program: Program) -> tuple[dict, int]:
    """A record bit for each outcome that a condition reads (`slot -> bit`), and how many bits: outcomes
    whose spans of top-level operations (`Program.spans`, first measurement to last read) do not meet share
    a bit, as registers are allocated, so a program that reads each outcome right after measuring it keeps
    one bit, not one per measurement. Measuring into a bit sums out its previous value (`measure`)."""
    read = {key for key, _ in program.referenced if key in program.slots}
    spans = sorted((program.spans[key], program.slots[key]) for key in read)
    compact, ends = {}, []  # ends[b]: the last position at which bit b's current outcome is live
    for (first, last), slot in spans:
        bit = next((b for b, end in enumerate(ends) if end < first), len(ends))
        ends[bit : bit + 1] = [last]  # a free bit, or a new one
        compact[slot] = bit
    return compact, len(ends)


def _outcome_transfer(outcome: int, to: int, dtype) -> np.ndarray:
    """On one wire's Pauli digit (I, X, Y, Z): project on `outcome` and leave the wire in `to`.
    `tr(P_b rho) = (c_I + s c_Z) / 2` with `s = (-1)**outcome`; the wire's X and Y parts vanish and its Z
    part is `(-1)**to` times that."""
    s, t = (-1.0) ** outcome, (-1.0) ** to
    m = np.zeros((4, 4))
    m[0, 0], m[0, 3] = 0.5, 0.5 * s
    m[3, 0], m[3, 3] = 0.5 * t, 0.5 * s * t
    return m.astype(dtype)


class MixedSimulator:
    """How each step acts on the classical-quantum carry (see the module docstring); used by `traverse`.
    With `pauli`, each record is held as real Pauli coefficients (`_pauli.py`) instead of the complex
    flattened density matrix."""

    def __init__(self, program: Program, n: int, pauli: bool = False):
        self.compact, self.R = _registers(program)
        self.n, self.pauli = n, pauli
        check_memory(
            2**self.R * 4**n,
            f"qfx.DensityMatrix(): a density matrix of {n} wires per record of the {self.R} mid-circuit "
            "outcomes that conditions read",
            "Read fewer outcomes, or use fewer wires.",
        )
        records = np.arange(2**self.R)
        self.bits = [jnp.asarray((records >> (self.R - 1 - i)) & 1, jnp.int32) for i in range(self.R)]

    def initial(self, rho0: Array) -> Array:
        """The carry from the initial state, in this simulator's representation (Pauli coefficients with
        `pauli`, else the flattened density matrix)."""
        return jnp.zeros((2**self.R, rho0.shape[0]), rho0.dtype).at[0].set(rho0)

    def operations(self, x: Array, ops: list) -> Array:
        """A run of gates and channels between two control-flow steps, grouped into superoperator blocks
        (`doubled`) and applied to every record's density matrix."""
        doubled_ops = doubled(ops, self.n, pauli=self.pauli)
        if self.pauli:
            return jax.vmap(lambda r: run_pauli(doubled_ops, r, self.n))(x)
        return jax.vmap(lambda r: run(doubled_ops, r, 2 * self.n))(x)

    def _outcome(self, x, w: int, outcome: int, to: int) -> Array:
        """Each record projected on `outcome` of wire `w`, the wire then left in `to` (unnormalised)."""
        if self.pauli:
            m = jnp.asarray(_outcome_transfer(outcome, to, np.dtype(x.dtype)))
            return jax.vmap(lambda r: apply_transfer(r, m, (w,), self.n))(x)
        n = self.n
        c, d = 2**w, 2 ** (n - w - 1)
        block = x.reshape(2**self.R, c, 2, d, c, 2, d)[:, :, outcome, :, :, outcome, :]
        e = jnp.zeros((2, 2), x.dtype).at[to, to].set(1)
        return jnp.einsum("rabcd,xy->raxbcyd", block, e).reshape(x.shape)

    def measure(self, x, op: MidMeasure, slot: int):
        blocks = []
        for outcome in (0, 1):
            block = self._outcome(x, op.wire, outcome, 0 if op.reset else outcome)
            if op.postselect is not None and outcome != op.postselect:
                block = jnp.zeros_like(block)
            blocks.append(block)
        if slot not in self.compact:  # nothing reads it: both outcomes stay in one density matrix
            return blocks[0] + blocks[1]
        i = self.compact[slot]
        a, b = 2**i, 2 ** (self.R - i - 1)
        forgot = [blk.reshape(a, 2, b, -1).sum(axis=1) for blk in blocks]  # the register's previous value
        return jnp.stack(forgot, axis=1).reshape(x.shape)

    def _index(self, expr, slot) -> Array:
        return evaluate(expr, lambda token: self.bits[self.compact[slot(token)]])

    def _mask(self, x, mask: Array) -> Array:
        return x * mask.astype(x.dtype)[:, None]

    def switch_on(self, x, expr, branches, slot):
        index = jnp.clip(self._index(expr, slot), 0, len(branches) - 1)
        out = jnp.zeros_like(x)
        for k, branch in enumerate(branches):
            out = out + branch(self._mask(x, index == k))
        return out

    def weight(self, x) -> Array:
        """The trace of each record's density matrix: the probability of each record."""
        if self.pauli:  # the coefficient of the identity word
            return x[:, 0].astype(real_dtype())
        dim = 2**self.n
        diag = jnp.diagonal(x.reshape(-1, dim, dim), axis1=1, axis2=2)
        return jnp.real(jnp.sum(diag, axis=1)).astype(real_dtype())

    def while_on(self, x, expr, body, max_iterations, slot):
        active = self._index(expr, slot) != 0

        def step(x):
            looping = self._mask(x, active)
            return x - looping + body(looping)

        if max_iterations is not None:
            return jax.lax.scan(lambda x, _: (step(x), None), x, length=max_iterations)[0]
        eps = float(jnp.finfo(real_dtype()).eps)

        def looping(x):
            return jnp.sum(self.weight(self._mask(x, active))) > eps * jnp.sum(self.weight(x))

        return capped_while(looping, step, x, "exact")


def final_rho(x: Array, sim: MixedSimulator, program: Program) -> Array:
    """The density matrix after the circuit: the sum over records, normalised (post-selection)."""
    dim = 2**sim.n
    total = jnp.sum(sim.weight(x))
    if program.postselected:
        total = eqx.error_if(
            total,
            total <= (2 * jnp.finfo(total.dtype).eps) ** 2,
            "qfx.DensityMatrix(): the post-selected outcomes have probability 0 (to rounding).",
        )
    rho = jnp.sum(x, axis=0)
    if sim.pauli:
        rho = from_pauli(rho, sim.n)
    return rho.reshape(dim, dim) / total.astype(rho.dtype)
