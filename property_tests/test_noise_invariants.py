"""Invariants of noisy circuits: every channel is completely positive and trace preserving at any strength
in its range, and the density-matrix backend returns a state (trace 1, Hermitian, positive semidefinite)
equal to the NumPy density-matrix reference's."""

from hypothesis import given, settings, strategies as st
import numpy as np

import qfx
from tests import reference_mixed as mref
from tests.test_channels import ALL_CHANNELS

from .strategies import gates


@st.composite
def channels(draw, num_wires: int):
    name = draw(st.sampled_from(sorted(n for n, (k, _) in ALL_CHANNELS.items() if k <= num_wires)))
    k, make = ALL_CHANNELS[name]
    wires = tuple(draw(st.permutations(range(num_wires)))[:k])
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return make(rng, wires if k > 1 else wires[0])


@st.composite
def noisy_circuits(draw, num_wires: int = 2, max_depth: int = 5):
    ops = draw(st.lists(st.one_of(gates(num_wires), channels(num_wires)), min_size=1, max_size=max_depth))
    return qfx.Circuit(ops, num_wires=num_wires)


@given(channels(num_wires=2))
def test_every_channel_is_cptp(channel):
    ks = np.asarray(channel.kraus_matrices(), np.complex128)
    np.testing.assert_allclose(np.einsum("aji,ajk->ik", ks.conj(), ks), np.eye(ks.shape[-1]), atol=1e-5)
    # Complete positivity: the Choi matrix sum_i |K_i>><<K_i| is positive semidefinite.
    vecs = ks.reshape(ks.shape[0], -1)
    choi = np.einsum("ai,aj->ij", vecs, vecs.conj())
    assert np.min(np.linalg.eigvalsh(choi)) > -1e-6


# Each example is a new circuit structure, so a new compilation: fewer of them than the profile's.
@settings(max_examples=max(4, settings.default.max_examples // 3))
@given(noisy_circuits())
def test_the_density_matrix_is_a_state_and_matches_the_reference(circuit):
    rho = np.asarray(qfx.density_matrix(circuit, backend=qfx.DensityMatrix()), np.complex128)
    assert abs(np.trace(rho) - 1) < 1e-5
    np.testing.assert_allclose(rho, rho.conj().T, atol=1e-6)
    assert np.min(np.linalg.eigvalsh((rho + rho.conj().T) / 2)) > -1e-5
    np.testing.assert_allclose(rho, mref.final_rho(circuit), atol=1e-5)
