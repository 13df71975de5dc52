"""Differentiation methods, passed as `diff=` to the measurement functions."""

from ._adjoint import Adjoint as Adjoint
from ._backprop import Backprop as Backprop
from ._base import AbstractDiffMethod as AbstractDiffMethod, Expectation as Expectation
from ._finite_diff import FiniteDiff as FiniteDiff
from ._parameter_shift import ParameterShift as ParameterShift
