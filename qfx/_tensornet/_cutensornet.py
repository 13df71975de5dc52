"""External contractors for the tensor-network backend, NVIDIA cuTensorNet above all.

`qfx.TensorNetwork(contractor="cutensornet")` contracts each network with cuTensorNet on the GPU and
differentiates it with cuTensorNet's own backward pass. The bridge to JAX:

- **Data stays on the device.** The contraction is a `jax.experimental.buffer_callback`: inside `jit`
  XLA hands the callback its device buffers and its CUDA stream; they are wrapped as CuPy arrays (no
  copy, by `__cuda_array_interface__`) and given to a cached `cuquantum` `Network` with
  `reset_operands`, contracted on XLA's stream, and the result is copied device-to-device into XLA's
  output buffer. Nothing goes through the host.
- **Gradients.** The contraction is a `jax.custom_vjp`. Its backward pass is a second buffer callback
  that re-contracts (cuTensorNet keeps the intermediates of the last contraction, and other networks
  may have run in between) and calls `Network.gradients`. cuTensorNet follows Torch's convention for
  complex gradients, `grad_x = grad_y * conj(df/dx)`, where JAX's cotangents are `ct_x = ct_y * df/dx`;
  so the bridge passes `conj(ct)` in and conjugates what comes out. Only reverse mode: `jax.jvp` and
  `jax.jacfwd` of this contractor raise (the default `contractor="jax"` has every mode).
- **vmap.** Each callback is a `jax.custom_batching.custom_vmap`: a batch becomes one bigger network with
  an extra mode shared by the batched operands and the output, contracted in one call, never a host
  loop. For the backward pass every operand is broadcast along the batch (gate tensors are tiny), since
  each example's gradient has the operand's shape plus the batch. A batch of one is squeezed, because
  cuTensorNet's gradients refuse extent-1 modes.
- **Plans** (cuTensorNet's path, slicing, workspace) are made once per topology when the network is first
  traced, on the path qfx found with opt_einsum, and reused for new parameter values. cuTensorNet's
  gradients need a single slice; if it would slice a network (it does not fit the GPU's memory), the
  contraction falls back to `jnp.einsum` with a warning.

The same bridge runs on the CPU with `EinsumEngine`, a stand-in contractor (NumPy via opt_einsum, with
Torch's gradient convention), so that CI exercises the callbacks, the custom_vjp and the batching rules.

Installing the GPU extra on a CUDA machine: pick the wheels for the machine's CUDA major version (see
`nvidia-smi`; JAX itself needs `jax[cuda12]` or `jax[cuda13]`):

    pip install "jax[cuda12]" -e ".[gpu]"                       # CUDA 12: cuquantum-python-cu12 + CuPy
    pip install "jax[cuda13]" cuquantum-python-cu13 cupy-cuda13x  # CUDA 13

(from the root of a qfx checkout: qfx is not on a package index).

cuquantum-python pulls in cuTensorNet and cuTENSOR (the cuTENSOR wheel alone is about 210 MB). JAX
preallocates 75% of GPU memory and cuTensorNet allocates its workspace through CuPy, outside that pool:
set `XLA_PYTHON_CLIENT_MEM_FRACTION=0.5` (or `XLA_PYTHON_CLIENT_PREALLOCATE=false`) before importing JAX.
Check the install with `python -c "import cuquantum, cupy; print(cuquantum.__version__)"` and run the
GPU tests with `pytest -m gpu tests/test_tensornet.py`.
"""

import abc
import functools
import importlib
import inspect
import threading
from typing import NamedTuple
import warnings

import jax
from jax.experimental.buffer_callback import ExecutionStage, buffer_callback
import jax.numpy as jnp
from jaxtyping import Array
import numpy as np
import opt_einsum

from .._custom_types import EXACT

_INSTALL = (
    "pip install -e '.[gpu]' in a qfx checkout (cuquantum-python-cu12 and cupy-cuda12x; on CUDA 13: "
    "cuquantum-python-cu13 and cupy-cuda13x), with a CUDA build of JAX (pip install 'jax[cuda12]')"
)


class Spec(NamedTuple):
    """A network's static description: what the callbacks and the plan cache are keyed on."""

    engine: "AbstractEngine"
    inputs: tuple[tuple[int, ...], ...]
    output: tuple[int, ...]
    sizes: tuple[int, ...]  # the extent of each mode 0, 1, ...
    path: tuple[tuple[int, ...], ...]

    def shape(self, modes) -> tuple[int, ...]:
        return tuple(self.sizes[m] for m in modes)

    @property
    def equation(self) -> str:
        sym = opt_einsum.get_symbol
        ins = ",".join("".join(sym(m) for m in t) for t in self.inputs)
        return ins + "->" + "".join(sym(m) for m in self.output)

    def batched(self, batched: list[bool], size: int) -> "Spec":
        """The network of a batch: a new mode of extent `size` on the batched operands and the output."""
        b = len(self.sizes)
        inputs = tuple((b,) + t if isb else t for t, isb in zip(self.inputs, batched, strict=True))
        return self._replace(inputs=inputs, output=(b,) + self.output, sizes=self.sizes + (size,))


class AbstractEngine(abc.ABC):
    """Contracts a network given as device buffers, and computes its gradients (Torch's convention).

    Engines are hashable by identity: they are static parts of `qfx.TensorNetwork`."""

    @abc.abstractmethod
    def prepare(self, spec: Spec, dtype: np.dtype) -> bool:
        """Plans the network (once per topology); False if the engine cannot contract it in one slice."""

    @abc.abstractmethod
    def forward(self, spec: Spec, ctx, out, operands) -> None:
        """Writes the contraction of `operands` (buffers) into the buffer `out`."""

    @abc.abstractmethod
    def gradients(self, spec: Spec, ctx, grads, operands, output_gradient) -> None:
        """Writes `grad_i = output_gradient * conj(d out / d operand_i)` (summed) into `grads[i]`."""


# --- the JAX side: custom_vjp over custom_vmap over buffer_callback ------------------------------


def _einsum(spec: Spec, operands) -> Array:
    return jnp.einsum(spec.equation, *operands, optimize=list(spec.path), precision=EXACT)


def _fallback(spec: Spec, dtype) -> bool:
    if spec.engine.prepare(spec, np.dtype(dtype)):
        return False
    warnings.warn(
        f"{type(spec.engine).__name__} would slice this {len(spec.inputs)}-tensor network, and its gradients "
        "need a single slice: contracting it with jnp.einsum instead.",
        RuntimeWarning,
        stacklevel=2,
    )
    return True


def _forward(spec: Spec, operands) -> Array:
    dtype = operands[0].dtype

    @jax.custom_batching.custom_vmap
    def forward(*ops):
        if _fallback(spec, dtype):
            return _einsum(spec, ops)
        out = jax.ShapeDtypeStruct(spec.shape(spec.output), dtype)
        return buffer_callback(functools.partial(_forward_callback, spec), out)(*ops)

    @forward.def_vmap
    def rule(axis_size, in_batched, *ops):
        if axis_size == 1:
            ops = [x[0] if b else x for x, b in zip(ops, in_batched, strict=True)]
            return _forward(spec, ops)[None], True
        return _forward(spec.batched(in_batched, axis_size), ops), True

    return forward(*operands)


def _gradients(spec: Spec, operands, output_gradient) -> list[Array]:
    """Torch-convention gradients: `sum output_gradient * conj(d out / d operand_i)`."""
    dtype = operands[0].dtype

    @jax.custom_batching.custom_vmap
    def gradients(*args):
        *ops, og = args
        if _fallback(spec, dtype):
            _, vjp = jax.vjp(lambda *o: _einsum(spec, o), *ops)
            return [jnp.conj(g) for g in vjp(jnp.conj(og))]
        shapes = [jax.ShapeDtypeStruct(spec.shape(t), dtype) for t in spec.inputs]
        return buffer_callback(functools.partial(_gradients_callback, spec), shapes)(*ops, og)

    @gradients.def_vmap
    def rule(axis_size, in_batched, *args):
        if axis_size == 1:
            args = [x[0] if b else x for x, b in zip(args, in_batched, strict=True)]
            return [g[None] for g in _gradients(spec, args[:-1], args[-1])], [True] * (len(args) - 1)
        # Every example's gradient has the batch axis, so every operand carries the batch mode.
        args = [
            x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
            for x, b in zip(args, in_batched, strict=True)
        ]
        bspec = spec.batched([True] * len(spec.inputs), axis_size)
        return _gradients(bspec, args[:-1], args[-1]), [True] * (len(args) - 1)

    return gradients(*operands, output_gradient)


def _forward_callback(spec, ctx, out, *operands):
    if ctx.stage == ExecutionStage.EXECUTE:
        spec.engine.forward(spec, ctx, out, operands)


def _gradients_callback(spec, ctx, grads, *args):
    if ctx.stage == ExecutionStage.EXECUTE:
        spec.engine.gradients(spec, ctx, grads, args[:-1], args[-1])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _contract(spec: Spec, *operands) -> Array:
    return _forward(spec, operands)


def _contract_fwd(spec, *operands):
    return _forward(spec, operands), operands


def _contract_bwd(spec, operands, ct):
    # JAX: ct_x = ct * df/dx. Torch (cuTensorNet): g_x = g * conj(df/dx). So ct_x = conj(g_x(conj(ct))).
    grads = _gradients(spec, list(operands), jnp.conj(ct))
    return tuple(jnp.conj(g) for g in grads)


_contract.defvjp(_contract_fwd, _contract_bwd)


def contract(engine: AbstractEngine, inputs, output, path, operands) -> Array:
    """Contracts a network (modes as ints) with `engine`, differentiably (reverse mode) and batchably."""
    num_modes = 1 + max(max((max(t) for t in inputs if t), default=-1), max(output, default=-1))
    sizes = [2] * num_modes
    for modes, x in zip(inputs, operands, strict=True):
        for m, size in zip(modes, x.shape, strict=True):
            sizes[m] = size
    spec = Spec(engine, tuple(map(tuple, inputs)), tuple(output), tuple(sizes), tuple(map(tuple, path)))
    dtype = jnp.result_type(*operands)
    return _contract(spec, *[jnp.asarray(x).astype(dtype) for x in operands])


# --- a stand-in contractor on the CPU ---------------------------------------------------------------


class EinsumEngine(AbstractEngine):
    """A CPU stand-in for cuTensorNet: NumPy contractions (opt_einsum along the same path) behind the same
    buffer callbacks, with Torch's conjugate convention for gradients. It counts its calls and records the
    output shape of each network it contracts, so tests can prove that the bridge ran and that a batch was
    one network; `max_intermediate` (entries) makes it refuse large networks, as cuTensorNet refuses
    networks that need slicing."""

    def __init__(self, max_intermediate: int | None = None):
        self.max_intermediate = max_intermediate
        self.forward_calls = 0
        self.gradient_calls = 0
        self.contracted: list[tuple[int, ...]] = []  # output shape of each forward or gradient call
        self.planned: set = set()

    def prepare(self, spec, dtype):
        key = (spec.inputs, spec.output, spec.sizes, spec.path, dtype)
        if self.max_intermediate is not None:
            shapes = [spec.shape(t) for t in spec.inputs]
            _, info = opt_einsum.contract_path(spec.equation, *shapes, shapes=True, optimize=list(spec.path))
            if info.largest_intermediate > self.max_intermediate:
                return False
        self.planned.add(key)
        return True

    def forward(self, spec, ctx, out, operands):
        self.forward_calls += 1
        self.contracted.append(spec.shape(spec.output))
        arrays = [np.asarray(x) for x in operands]
        np.asarray(out)[...] = opt_einsum.contract(spec.equation, *arrays, optimize=list(spec.path))

    def gradients(self, spec, ctx, grads, operands, output_gradient):
        self.gradient_calls += 1
        self.contracted.append(spec.shape(spec.output))
        arrays = [np.asarray(x) for x in operands]
        og = np.conj(np.asarray(output_gradient))
        sym = opt_einsum.get_symbol
        out = "".join(sym(m) for m in spec.output)
        for i, t in enumerate(spec.inputs):
            others = [j for j in range(len(arrays)) if j != i]
            eq = ",".join(["".join(sym(m) for m in spec.inputs[j]) for j in others] + [out])
            eq += "->" + "".join(sym(m) for m in t)
            g = opt_einsum.contract(eq, *[arrays[j] for j in others], og, optimize="greedy")
            np.asarray(grads[i])[...] = np.conj(g)


# --- cuTensorNet ---------------------------------------------------------------------------------


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(
            f"TensorNetwork(contractor='cutensornet') needs NVIDIA cuQuantum's Python package and CuPy, but "
            f"importing {name!r} failed ({e}). Install them with {_INSTALL}; or use the default "
            "contractor='jax', which runs anywhere."
        ) from e


class CuTensorNetEngine(AbstractEngine):
    """Contracts with cuTensorNet's `Network` (one per topology and device), on XLA's CUDA stream."""

    def __init__(self):
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if not gpus:
            raise RuntimeError(
                "TensorNetwork(contractor='cutensornet') needs an NVIDIA GPU visible to JAX, but JAX has "
                f"only {[d.platform for d in jax.devices()]} devices. On a CUDA machine install {_INSTALL}; "
                "elsewhere use the default contractor='jax'."
            )
        self.cp = _import("cupy")
        cuquantum = _import("cuquantum")
        try:
            tensornet = importlib.import_module("cuquantum.tensornet")  # cuquantum-python >= 25.03
        except ImportError:
            tensornet = cuquantum
        self.Network = tensornet.Network
        bindings = getattr(getattr(cuquantum, "bindings", None), "cutensornet", None) or cuquantum.cutensornet
        self.qualifiers_dtype = bindings.tensor_qualifiers_dtype
        self.default_device = gpus[0].local_hardware_id
        self.networks: dict = {}  # (topology, dtype, device) -> Network, or None where it would slice
        self.lock = threading.Lock()

    def _network(self, spec: Spec, dtype, device: int):
        key = (spec.inputs, spec.output, spec.sizes, spec.path, dtype, device)
        if key not in self.networks:
            cp = self.cp
            with cp.cuda.Device(device):
                placeholders = [cp.zeros(spec.shape(t), dtype) for t in spec.inputs]
                qualifiers = np.zeros(len(spec.inputs), dtype=self.qualifiers_dtype)
                qualifiers["requires_gradient"] = 1
                interleaved = [
                    x for op, t in zip(placeholders, spec.inputs, strict=True) for x in (op, list(t))
                ]
                net = self.Network(
                    *interleaved, list(spec.output), qualifiers=qualifiers, options={"device_id": device}
                )
                _, info = net.contract_path(optimize={"path": [list(p) for p in spec.path]})
                if info.num_slices > 1:
                    net.free()
                    net = None
            self.networks[key] = net
        return self.networks[key]

    def prepare(self, spec, dtype):
        return self._network(spec, dtype, self.default_device) is not None

    def _arrays(self, buffers):
        return [self.cp.asarray(b) for b in buffers]

    def _run(self, spec, ctx, operands):
        """Sets the operands of the cached network and contracts it on XLA's stream."""
        cp = self.cp
        device = cp.cuda.runtime.pointerGetAttributes(operands[0].__cuda_array_interface__["data"][0]).device
        stream = cp.cuda.ExternalStream(ctx.stream, device)
        with cp.cuda.Device(device), stream:
            net = self._network(spec, np.dtype(operands[0].dtype), device)
            arrays = self._arrays(operands)
            if "stream" in inspect.signature(net.reset_operands).parameters:
                net.reset_operands(*arrays, stream=stream)
            else:  # cuquantum-python < 24.08
                net.reset_operands(*arrays)
            return net, stream, net.contract(stream=stream)

    def forward(self, spec, ctx, out, operands):
        with self.lock:
            net, stream, result = self._run(spec, ctx, operands)
            with stream:
                self.cp.asarray(out)[...] = result

    def gradients(self, spec, ctx, grads, operands, output_gradient):
        with self.lock:
            net, stream, _ = self._run(spec, ctx, operands)
            with stream:
                (og,) = self._arrays([output_gradient])
                with warnings.catch_warnings():  # "an experimental API" (cuquantum-python 26): noise to users
                    warnings.filterwarnings("ignore", r"Network.gradients\(\)", UserWarning)
                    gradients = net.gradients(og, stream=stream)
                for buffer, g in zip(grads, gradients, strict=True):
                    self.cp.asarray(buffer)[...] = g


@functools.cache
def cutensornet_engine() -> CuTensorNetEngine:
    """The process's cuTensorNet engine (one, so that equal `TensorNetwork`s compare equal under jit)."""
    return CuTensorNetEngine()
