"""qfx: quantum circuits as Equinox pytrees, simulated and differentiated in pure JAX."""

from . import diff as diff, interop as interop, templates as templates
from ._backend import (
    AbstractBackend as AbstractBackend,
    AbstractStateVectorBackend as AbstractStateVectorBackend,
)
from ._circuit import Circuit as Circuit, Repeat as Repeat, repeat as repeat
from ._control import (
    Cond as Cond,
    ForLoop as ForLoop,
    MeasurementValue as MeasurementValue,
    MidMeasure as MidMeasure,
    WhileLoop as WhileLoop,
    autograph as autograph,
    cond as cond,
    for_loop as for_loop,
    measure as measure,
    switch as switch,
    while_loop as while_loop,
)
from ._counts import counts as counts
from ._drawing import draw as draw, draw_mpl as draw_mpl
from ._gates import (
    CNOT as CNOT,
    CRX as CRX,
    CRY as CRY,
    CRZ as CRZ,
    CSWAP as CSWAP,
    CY as CY,
    CZ as CZ,
    ISWAP as ISWAP,
    RX as RX,
    RY as RY,
    RZ as RZ,
    SWAP as SWAP,
    SX as SX,
    U1 as U1,
    U2 as U2,
    U3 as U3,
    AbstractGate as AbstractGate,
    AbstractOperation as AbstractOperation,
    Adjoint as Adjoint,
    Controlled as Controlled,
    ControlledPhaseShift as ControlledPhaseShift,
    CRot as CRot,
    DoubleExcitation as DoubleExcitation,
    H as H,
    Hadamard as Hadamard,
    I as I,  # noqa: E741
    Identity as Identity,
    IsingXX as IsingXX,
    IsingXY as IsingXY,
    IsingYY as IsingYY,
    IsingZZ as IsingZZ,
    MultiControlledX as MultiControlledX,
    MultiRZ as MultiRZ,
    PauliRot as PauliRot,
    PauliX as PauliX,
    PauliY as PauliY,
    PauliZ as PauliZ,
    PhaseShift as PhaseShift,
    QubitUnitary as QubitUnitary,
    Rot as Rot,
    S as S,
    SingleExcitation as SingleExcitation,
    StatePrep as StatePrep,
    T as T,
    Toffoli as Toffoli,
    X as X,
    Y as Y,
    Z as Z,
)
from ._measure import (
    amplitude as amplitude,
    density_matrix as density_matrix,
    expval as expval,
    probs as probs,
    sample as sample,
    state as state,
    var as var,
)
from ._observables import (
    AbstractObservable as AbstractObservable,
    Hermitian as Hermitian,
    LinearCombination as LinearCombination,
    PauliWord as PauliWord,
    eigvalsh as eigvalsh,
    ground_state as ground_state,
    matrix as matrix,
    pauli as pauli,
)
from ._specs import Specs as Specs, specs as specs
from ._statevector import (
    StateVector as StateVector,
    apply as apply,
    measure_state as measure_state,
    outcome_probs as outcome_probs,
    zero_state as zero_state,
)
from ._straight_through import straight_through_argmax as straight_through_argmax
from ._tensornet import TensorNetwork as TensorNetwork
from .interop import from_qasm as from_qasm, to_qasm as to_qasm

# Noise: channels and the backends that simulate them (kept together, after the rest).
# isort: split
from ._channels import (
    AbstractChannel as AbstractChannel,
    AmplitudeDamping as AmplitudeDamping,
    BitFlip as BitFlip,
    DepolarizingChannel as DepolarizingChannel,
    GeneralizedAmplitudeDamping as GeneralizedAmplitudeDamping,
    PauliError as PauliError,
    PhaseDamping as PhaseDamping,
    PhaseFlip as PhaseFlip,
    QubitChannel as QubitChannel,
    ResetError as ResetError,
    ThermalRelaxationError as ThermalRelaxationError,
)
from ._densitymatrix import DensityMatrix as DensityMatrix
from ._noise_model import AfterGates as AfterGates, NoiseModel as NoiseModel, Readout as Readout
from ._trajectories import Trajectories as Trajectories

__version__ = "0.1.0"
