"""The state-vector backend: kernels, the fusion pipeline, reductions, the adjoint walk, control-flow
simulators and the functional API. See README.md."""

from ._backend import StateVector as StateVector
from ._functional import (
    apply as apply,
    measure_state as measure_state,
    outcome_probs as outcome_probs,
    zero_state as zero_state,
)
from ._simulators import check_mcm as check_mcm
