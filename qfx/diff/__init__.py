"""Differentiation methods, passed as `diff=` to the measurement functions."""

from ._base import AbstractDiffMethod as AbstractDiffMethod, Backprop as Backprop
