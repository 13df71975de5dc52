"""Differentiation methods, passed as `diff=` to the measurement functions. The default is `Auto()`."""

from ._adjoint import Adjoint as Adjoint
from ._auto import Auto as Auto
from ._backprop import Backprop as Backprop
from ._base import AbstractDiffMethod as AbstractDiffMethod
from ._finite_diff import FiniteDiff as FiniteDiff
from ._parameter_shift import ParameterShift as ParameterShift
