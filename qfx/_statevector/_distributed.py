"""The kernels of a state vector sharded over a mesh axis: what runs on each device inside `shard_map`.

Each device holds `2**(n - g)` amplitudes, those whose top `g` index bits are its index along the axis
(`_layout.py` says where each qubit lives). Gates run on the local amplitudes through the state-vector
pipeline; a swap of a global qubit with a local one exchanges half of each device's amplitudes with the
device whose bit differs (`jax.lax.ppermute`); reductions end in `jax.lax.psum`. Everything is JAX's own
collectives, so the same program runs on the GPUs of one machine, on several hosts after
`jax.distributed.initialize`, and on forced host CPU devices.
"""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np

from .._custom_types import complex_dtype, real_dtype
from .._measurements import Amplitude, DensityMatrix, Expval, Probs, Sample, State, Var
from .._observables import Hermitian, LinearCombination, PauliWord, square
from . import _walk
from ._layout import LocalRun, Permute, Swap
from ._measure import _expvals, bits
from ._pipeline import run
from ._reductions import marginal_probs, reduced_density_matrix, sample_indices


class Shards:
    """The static facts of one sharding: `n` wires, `g` of them global, over the mesh axis `axis`."""

    def __init__(self, n: int, g: int, axis: str):
        self.n, self.g, self.axis = n, g, axis
        self.local = n - g

    def device_bits(self) -> Array:
        """This device's bits along the axis (int32, the most significant first): the global wires' values."""
        d = jax.lax.axis_index(self.axis)
        return (d >> jnp.arange(self.g - 1, -1, -1, dtype=jnp.int32)) & 1

    def zero(self) -> Array:
        """This device's share of |0...0>: its first amplitude is 1 on device 0."""
        first = (jax.lax.axis_index(self.axis) == 0).astype(complex_dtype())
        return jnp.zeros((2**self.local,), complex_dtype()).at[0].set(first)

    # --- moving qubits --------------------------------------------------------------------------------

    def swap(self, s: Array, p: int, q: int) -> Array:
        """Exchanges the qubit at global position `p` with the one at local axis `q`.

        The amplitudes whose local bit `q` equals this device's bit `p` stay where they are; the other
        half goes to the device whose bit `p` differs, and that device's such half takes its place (an
        in-place update): one exchange of half a shard between pairs of devices, and two halves of
        buffers besides the shard."""
        k = 2**self.g
        mask = 1 << (self.g - 1 - p)
        other = 1 - self.device_bits()[p]
        view = s.reshape(2**q, 2, 2 ** (self.local - q - 1))
        send = jax.lax.dynamic_slice_in_dim(view, other, 1, axis=1)
        recv = jax.lax.ppermute(send, self.axis, perm=[(e, e ^ mask) for e in range(k)])
        return jax.lax.dynamic_update_slice_in_dim(view, recv, other, axis=1).reshape(-1)

    def permute(self, s: Array, perm: tuple[int, ...]) -> Array:
        return s.reshape((2,) * self.local).transpose(perm).reshape(-1)

    def localized(self, s: Array, far, avoid) -> tuple[Array, dict]:
        """`s` with each global position in `far` swapped with a local axis outside `avoid` (the local
        axes some term reads); and where each of those wires now is."""
        free = [q for q in range(self.local) if q not in avoid]
        if len(free) < len(far):
            raise ValueError(
                f"A measurement on {len(far) + len(avoid)} wires does not fit in the {self.local} wires that "
                f"each device keeps of a {self.n}-wire state sharded over {2**self.g} devices; measure fewer "
                "wires at once, or use fewer devices."
            )
        at = {}
        for p, q in zip(sorted(far), free, strict=False):
            s = self.swap(s, p, q)
            at[p] = q
        return s, at

    # --- the circuit, forwards and backwards ----------------------------------------------------------

    def forward(self, items: list, s: Array) -> Array:
        for item in items:
            if isinstance(item, Swap):
                s = self.swap(s, item.p, item.q)
            elif isinstance(item, Permute):
                s = self.permute(s, item.perm)
            elif isinstance(item, LocalRun):
                s = run(item.ops, s, self.local)
            else:  # Loop; checkpointed as the unsharded `Repeat` is

                @jax.checkpoint
                def layer(s, body):
                    return self.forward(body, s), None

                s, _ = jax.lax.scan(layer, s, item.body, length=item.length)
        return s

    def backward(self, items: list, pair) -> tuple[list, tuple]:
        """The adjoint walk of `items` from `(state, bra)` after them: this device's share of the
        cotangents of their leaves (in `jax.tree.leaves` order), and the pair before them."""
        cotangents: list = [[] for _ in items]
        for i in reversed(range(len(items))):
            item = items[i]
            if isinstance(item, Swap):  # its own inverse
                pair = tuple(self.swap(x, item.p, item.q) for x in pair)
            elif isinstance(item, Permute):
                inverse = tuple(int(j) for j in np.argsort(item.perm))
                pair = tuple(self.permute(x, inverse) for x in pair)
            elif isinstance(item, LocalRun):
                cotangents[i], pair = _walk.backward(item.ops, pair, self.local)
            else:  # Loop

                def layer(pair, body):
                    leaves, pair = self.backward(body, pair)
                    return pair, leaves

                pair, cotangents[i] = jax.lax.scan(layer, pair, item.body, length=item.length, reverse=True)
        return [c for group in cotangents for c in group], pair

    # --- measurements ---------------------------------------------------------------------------------

    def measure(self, measurement, s: Array, args) -> Array:
        """The value of `measurement` (before its `post`) of the state whose shard is `s` (identity
        layout): sharded for `qfx.state` and the probabilities of every wire in order, else the same on
        every device."""
        payload, key = args
        if isinstance(measurement, State):
            return s
        if isinstance(measurement, Probs):
            if measurement.wires == tuple(range(self.n)):
                return jnp.real(s * s.conj()).astype(real_dtype())
            return self.probs(s, measurement.wires)
        if isinstance(measurement, Amplitude):
            weights = 2 ** jnp.arange(self.n - 1, -1, -1, dtype=jnp.int32)
            device = jnp.sum(payload[: self.g] * weights[: self.g]) >> self.local
            mine = jax.lax.axis_index(self.axis) == device
            return jax.lax.psum(
                jnp.where(mine, s[jnp.sum(payload[self.g :] * weights[self.g :])], 0), self.axis
            )
        if isinstance(measurement, DensityMatrix):
            wires = measurement.wires
            st, at = self.localized(
                s, [w for w in wires if w < self.g], {w - self.g for w in wires if w >= self.g}
            )
            local = tuple(at[w] if w < self.g else w - self.g for w in wires)
            return jax.lax.psum(reduced_density_matrix(st, local, self.local), self.axis)
        if isinstance(measurement, Expval):
            return self.expvals(s, payload)
        if isinstance(measurement, Var):
            return jnp.stack([self.expvals(s, tuple(square(o) for o in payload)), self.expvals(s, payload)])
        if isinstance(measurement, Sample):
            return self.sample(s, measurement.wires, key, measurement.shots)
        raise TypeError(f"qfx.StateVector(mesh=...) has no rule for the measurement {measurement!r}.")

    def probs(self, s: Array, wires: tuple[int, ...]) -> Array:
        far = [i for i, w in enumerate(wires) if w < self.g]
        near = [i for i, w in enumerate(wires) if w >= self.g]
        local = marginal_probs(s, tuple(wires[i] - self.g for i in near), self.local)
        device = self.device_bits()
        t = jnp.zeros((2,) * len(far) + local.shape, local.dtype)
        t = jax.lax.psum(t.at[tuple(device[wires[i]] for i in far)].set(local), self.axis)
        order = far + near
        t = t.reshape((2,) * len(wires)).transpose([order.index(i) for i in range(len(wires))])
        return t.reshape(-1)

    def expvals(self, s: Array, lcs) -> Array:
        """`<O>` of each observable. Terms are grouped, across all the observables, by the global wires on
        which they flip bits (X, Y; any wire of a Hermitian term): a group with none is read on each
        device's shard as it is (a Z on a global wire is the sign of the device's bit); each other group
        after swapping its wires in, once for all the observables."""
        device = self.device_bits()
        groups: dict = {}
        for i, lc in enumerate(lcs):
            for k, t in enumerate(lc.terms):
                if isinstance(t, PauliWord):
                    far = tuple(w for w, letter in t.word if w < self.g and letter in "XY")
                else:
                    far = tuple(w for w in t.wires if w < self.g)
                groups.setdefault(far, []).append((i, k))

        def avoid(members):
            return {w - self.g for i, k in members for w in lcs[i].terms[k].wires if w >= self.g}

        batches = []  # (far, members) read from one localized state
        for far, members in groups.items():
            if len(far) + len(avoid(members)) <= self.local:
                batches.append((far, members))
            else:  # too many local wires in use for one swap set: one per observable
                for i in sorted({i for i, _ in members}):
                    batches.append((far, [(j, k) for j, k in members if j == i]))
        values = [jnp.zeros((), real_dtype()) for _ in lcs]
        for far, members in batches:
            st, at = self.localized(s, far, avoid(members))
            for i in sorted({i for i, _ in members}):
                ks = [k for j, k in members if j == i]
                terms, signs = [], []
                for k in ks:
                    t = lcs[i].terms[k]
                    sign = jnp.ones((), real_dtype())
                    if isinstance(t, PauliWord):
                        word = {}
                        for w, letter in t.word:
                            if w < self.g and w not in at:  # a Z on a global wire
                                sign = sign * (1 - 2 * device[w]).astype(real_dtype())
                            else:
                                word[at[w] if w < self.g else w - self.g] = letter
                        terms.append(PauliWord(word))
                    else:
                        terms.append(
                            Hermitian(t.matrix, [at[w] if w < self.g else w - self.g for w in t.wires])
                        )
                    signs.append(sign)
                coeffs = lcs[i].coeffs[np.asarray(ks, dtype=np.int32)] * jnp.stack(signs)
                values[i] = values[i] + _expvals(st, (LinearCombination(coeffs, terms),), self.local)[0]
        return jax.lax.psum(jnp.stack(values), self.axis)

    def sample(self, s: Array, wires: tuple[int, ...], key, shots: int) -> Array:
        """`shots` outcomes of `wires`, drawn where the amplitudes are: each shot's device from the
        devices' total probabilities (the same draw everywhere), then its local bits on every device from
        that device's own share; each shot keeps the bits of the device it drew."""
        far = [i for i, w in enumerate(wires) if w < self.g]
        near = [i for i, w in enumerate(wires) if w >= self.g]
        p = jnp.real(s * s.conj()).astype(real_dtype())
        d = jax.lax.axis_index(self.axis)
        k = 2**self.g
        totals = jax.lax.psum(jnp.zeros((k,), p.dtype).at[d].set(jnp.sum(p)), self.axis)
        key_device, key_local = jax.random.split(key)
        chosen = sample_indices(key_device, totals, shots)
        local = marginal_probs(s, tuple(wires[i] - self.g for i in near), self.local)
        drawn = bits(sample_indices(jax.random.fold_in(key_local, d), local, shots), len(near))
        mine = (chosen == d)[:, None]
        near_bits = jax.lax.psum(jnp.where(mine, drawn, 0), self.axis)
        far_bits = bits(chosen, self.g)[:, [wires[i] for i in far]]
        out = jnp.concatenate([far_bits, near_bits], axis=1)
        order = far + near
        return out[:, [order.index(i) for i in range(len(wires))]]


def global_wires(devices: int) -> int:
    """How many wires `devices` (a power of two) shards take: log2 of their number."""
    return int(math.log2(devices))
