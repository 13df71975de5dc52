"""The state-vector backend: kernels, the fusion pipeline, reductions, the adjoint walk, control-flow
simulators and the functional API. See README.md."""

from ._backend import StateVector as StateVector
from ._functional import (
    apply as apply,
    measure_state as measure_state,
    outcome_probs as outcome_probs,
    zero_state as zero_state,
)

# The kernels and reductions that the other state-based backends (qfx/_densitymatrix/,
# qfx/_trajectories/) reuse: their interface to this wing.
from ._fusion import batchable as batchable
from ._kernels import apply_gate as apply_gate, apply_matrix as apply_matrix
from ._measure import (
    binomial as binomial,
    bits as bits,
    measure_mixed as measure_mixed,
    measure_pure as measure_pure,
    mixed_density_matrix as mixed_density_matrix,
    mixed_expvals as mixed_expvals,
    mixed_probs as mixed_probs,
    multinomial as multinomial,
    sampled as sampled,
)
from ._pipeline import run as run
from ._reductions import (
    marginal_probs as marginal_probs,
    reduced_density_matrix as reduced_density_matrix,
    sample_indices as sample_indices,
)
from ._simulators import check_mcm as check_mcm
from ._states import initial_state_of as initial_state_of
