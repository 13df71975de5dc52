"""The density-matrix backend: the mixed state as a 2n-wire array, gates as U (x) U*, channels as
superoperators, run by the state-vector pipeline. See README.md."""

from ._backend import DensityMatrix as DensityMatrix
