"""The tensor-network backend: networks, contraction paths, operands, cuTensorNet. See README.md."""

from ._backend import TensorNetwork as TensorNetwork
from ._network import clear_cache as clear_cache
