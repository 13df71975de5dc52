"""The machinery behind `qfx.torch`: tensors across by DLPack, JAX functions as `torch.autograd.Function`s.

Imported only by `qfx/torch/__init__.py`; `import qfx` never imports this module (nor torch).

**Tensors cross by DLPack, without copying when they can.** Torch -> JAX is zero-copy for a contiguous
tensor on a device JAX sees, whose buffer is 64-byte aligned (every tensor torch allocates is; a slice that
starts inside a buffer may not be). The bridge copies, on purpose, in these cases only:

- a non-contiguous view (a step slice, a transpose, an `expand`): JAX refuses strided buffers, so the
  bridge calls `.contiguous()`;
- a misaligned buffer: JAX copies it into an aligned one;
- a CPU tensor of at most 64 KiB entering a jitted call: the call copies it from a NumPy view, which
  costs less than a DLPack import (`_COPY_MAX_BYTES`); `qfx.torch.to_jax` itself never copies;
- a tensor with torch's lazy conjugate or negative bit: the bit is resolved first (raw DLPack would export
  the unconjugated memory);
- an output that aliases an input or another output (a jitted JAX function may return an input array as
  it is): it is cloned, so that an in-place write to one torch tensor cannot change another;
- every output of an untraced function (`jit=False`), which may return an array it closes over.

Tensors that require grad are detached (no copy). JAX -> Torch is always zero-copy: each output buffer is
fresh and owned by the returned tensor alone.

**Devices.** A call runs where its inputs are, and its results come back there: CPU tensors run on JAX's
CPU device even where JAX's default device is a GPU (arguments that enter as NumPy views, and arrays the
function creates, would otherwise land on the GPU), CUDA tensors on their GPU. Inputs on different devices
are refused with an error that names them.

**Immutability.** A JAX array made from a torch buffer would change if torch later wrote that buffer in
place. The only such arrays the bridge keeps beyond a call are VJP residuals that happen to be an input
(kept for the backward, see `Bridge`), and every backward first reads the saved inputs, so torch's
version counters raise the usual "modified by an inplace operation" error when an input (e.g. a
parameter after `optimizer.step()`) was written in between. Converting an output to torch waits for the
JAX computation to finish, so an input may be written as soon as the call returns.
"""

from collections.abc import Callable
import contextlib
import functools
import inspect
import math
import threading
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import torch
import torch.autograd.forward_ad as _forward_ad
import torch.utils.dlpack

try:  # Private fast paths (see `_fast_paths`); the public API is the fallback when they are missing.
    from jax._src.lib import _jax as _jax_ext, jaxlib_extension_version as _JAXLIB_EXT
except ImportError:  # pragma: no cover
    _jax_ext, _JAXLIB_EXT = None, 0


try:  # What `torch.autograd.Function.apply` calls once its Python checks pass (see `Bridge.apply`).
    _C_APPLY = torch._C._FunctionBase.__dict__["apply"]
    _transforms_active = torch._C._are_functorch_transforms_active
    _unwrap_if_dead = torch._C._functorch.unwrap_if_dead
except (AttributeError, KeyError):  # pragma: no cover
    _C_APPLY = None


_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_COMPLEX = frozenset({torch.complex64, torch.complex128})
_DIFFERENTIABLE = _FLOATING | _COMPLEX
_NEEDS_X64 = frozenset({torch.float64, torch.complex128})
_DLPACK_CPU = 1  # DLDeviceType.kDLCPU
_DLPACK_CUDA = 2  # DLDeviceType.kDLCUDA


# --- tensors across -------------------------------------------------------------------------------


@functools.cache
def _fast_paths() -> tuple[Any, Any]:
    """The CPU converters, checked once on a probe tensor.

    `jax.dlpack.from_dlpack` is slow on CPU tensors (it discovers that a CPU device has no stream by
    raising and catching an error, then re-wraps the array with `jnp.asarray`); the extension function it
    calls does neither, at a fraction of the cost (see README.md). The bridge calls that function
    directly for CPU tensors when it exists with the expected signature and a probe round trip is
    zero-copy and exact; otherwise it falls back to the public functions. GPU tensors always go through
    the public functions, which handle streams.
    """
    to_jax = to_torch = None
    if _jax_ext is None:  # pragma: no cover
        return None, None
    probe = torch.arange(16, dtype=torch.float32)
    cpu = jax.devices("cpu")[0]
    if _JAXLIB_EXT >= 467 and hasattr(_jax_ext, "dlpack_managed_tensor_to_buffer"):

        def to_jax(t):
            return _jax_ext.dlpack_managed_tensor_to_buffer(
                torch.utils.dlpack.to_dlpack(t), cpu, None, None, 1
            )

        try:
            a = to_jax(probe)
            ok = a.unsafe_buffer_pointer() == probe.data_ptr() and np.array_equal(
                np.asarray(a), probe.numpy()
            )
        except Exception:  # noqa: BLE001 - any failure means: use the public path
            ok = False
        to_jax = to_jax if ok else None
    if hasattr(_jax_ext, "buffer_to_dlpack_managed_tensor"):

        def to_torch(a):
            return torch.utils.dlpack.from_dlpack(_jax_ext.buffer_to_dlpack_managed_tensor(a, stream=None))

        try:
            a = jnp.arange(16, dtype=jnp.float32)
            t = to_torch(a)
            ok = t.data_ptr() == a.unsafe_buffer_pointer() and np.array_equal(t.numpy(), np.asarray(a))
        except Exception:  # noqa: BLE001
            ok = False
        to_torch = to_torch if ok else None
    return to_jax, to_torch


@functools.cache
def _cpu_device() -> jax.Device:
    return jax.devices("cpu")[0]


@functools.cache
def _gpu_device(index: int) -> jax.Device | None:
    return next((d for d in jax.devices() if d.platform == "gpu" and d.local_hardware_id == index), None)


def _placement(tensors) -> tuple[contextlib.AbstractContextManager, jax.Device | None]:
    """Where a call on `tensors` runs (see "Devices" in the module docstring), after checking that they
    are on one device: a context that makes it JAX's default device, and the device (None if unknown)."""
    if all(t.is_cpu for t in tensors):
        device = _cpu_device()
    else:
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            names = ", ".join(sorted(map(str, devices)))
            raise ValueError(
                f"qfx.torch: the input tensors are on different devices ({names}); a JAX call runs on one "
                "device: move them to one with .to(device)."
            )
        device = _gpu_device(tensors[0].device.index) if tensors[0].is_cuda else None
    return (contextlib.nullcontext() if device is None else jax.default_device(device)), device


@functools.cache
def _cuda_paths(index: int) -> tuple[Any, Any]:
    """The converters for CUDA tensors on device `index`, checked once on a probe tensor, or (None, None).

    The public functions do more per tensor (torch's `__dlpack__` orders the streams in Python, JAX
    re-wraps the array), which this path skips (measurements: README.md, `benchmarks/README.md`). The
    streams are ordered as the public functions order them. Import: JAX's stream for external producers
    is made to wait for torch's current stream (an event), and is handed to PJRT, which appends to it the
    event JAX waits for before it reads the buffer. Export: JAX makes torch's current stream wait until
    the buffer is written. So torch work queued before a call is seen by it, and torch work queued after
    it sees its results.
    """
    current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    device = _gpu_device(index)
    if _jax_ext is None or _JAXLIB_EXT < 467 or current_stream is None or device is None:  # pragma: no cover
        return None, None
    cuda = torch.device("cuda", index)
    streams: dict[int, torch.cuda.Stream] = {}  # raw handle -> torch's Stream object (cheap lookups)

    def torch_stream(raw: int) -> torch.cuda.Stream:
        if raw not in streams:
            wrap = torch.cuda.ExternalStream if raw else lambda _, device: torch.cuda.default_stream(device)
            streams[raw] = wrap(raw, device=cuda)
        return streams[raw]

    def to_jax(t):
        ready = device.get_stream_for_external_ready_events()
        event = torch.cuda.Event()
        event.record(torch_stream(current_stream(index)))
        torch_stream(ready).wait_event(event)
        return _jax_ext.dlpack_managed_tensor_to_buffer(
            torch.utils.dlpack.to_dlpack(t), device, ready, None, _DLPACK_CUDA
        )

    def to_torch(a):
        # DLPack's convention: 1 names CUDA's legacy default stream, which torch reports as 0.
        stream = current_stream(index) or 1
        return torch.utils.dlpack.from_dlpack(_jax_ext.buffer_to_dlpack_managed_tensor(a, stream=stream))

    try:
        probe = torch.arange(16, dtype=torch.float32, device=f"cuda:{index}")
        a = to_jax(probe)
        b = jax.device_put(np.arange(16, dtype=np.float32), device)
        t = to_torch(b)
        ok = (
            a.unsafe_buffer_pointer() == probe.data_ptr()
            and np.array_equal(np.asarray(a), probe.cpu().numpy())
            and t.data_ptr() == b.unsafe_buffer_pointer()
            and np.array_equal(t.cpu().numpy(), np.asarray(b))
        )
    except Exception:  # noqa: BLE001 - any failure means: use the public functions
        ok = False
    return (to_jax, to_torch) if ok else (None, None)


def _converters(tensors) -> tuple[Any, Any]:
    """(to_jax, to_torch) for tensors on one device: the fast paths of that device, or (None, None)."""
    if all(t.is_cpu for t in tensors):
        return _fast_paths()
    if tensors[0].is_cuda:
        return _cuda_paths(tensors[0].device.index)
    return None, None  # pragma: no cover - no other device passes `check_tensor`


def _prepare(t: torch.Tensor) -> torch.Tensor:
    """Makes `t` exportable by DLPack: detached, contiguous, no lazy conjugate or negative bit."""
    if t.requires_grad:
        t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t


def tensor_to_jax(t: torch.Tensor) -> jax.Array:
    """A torch tensor as a JAX array on the same device; zero-copy when the module docstring says so."""
    t = _prepare(t)
    to_jax, _ = _converters((t,))
    if to_jax is not None:
        return to_jax(t)
    return jax.dlpack.from_dlpack(t)


# CPU tensors of at most this many bytes enter a jitted call as NumPy views, which the call copies into
# JAX buffers: for small tensors that is cheaper than the fixed cost of a DLPack import (measured in a
# training loop: README.md, `benchmarks/torch_overhead.py`). Larger ones cross zero-copy.
_COPY_MAX_BYTES = 1 << 16


def _cpu_argument(t: torch.Tensor, to_jax: Callable) -> Any:
    """A prepared CPU tensor as an argument of a jitted call: a NumPy view when small, else a JAX array."""
    if t.dtype is not torch.bfloat16 and t.numel() * t.element_size() <= _COPY_MAX_BYTES:
        return t.numpy()  # NumPy has no bfloat16
    return to_jax(t)


def jax_to_tensor(a: jax.Array) -> torch.Tensor:
    """A JAX array as a torch tensor on the same device, zero-copy."""
    if not isinstance(a, jax.Array):
        a = jnp.asarray(a)
    kind, index = a.__dlpack_device__()
    if kind == _DLPACK_CPU:
        _, to_torch = _fast_paths()
    else:
        _, to_torch = _cuda_paths(index) if kind == _DLPACK_CUDA else (None, None)
    if to_torch is not None:
        return to_torch(a)
    return torch.from_dlpack(a)


# --- input checks ---------------------------------------------------------------------------------


def _jax_gpu_ids() -> frozenset[int]:
    try:
        return frozenset(d.local_hardware_id for d in jax.devices("gpu"))
    except RuntimeError:
        return frozenset()


def check_tensor(t: Any, name: str) -> None:
    """Raises a clear error when `t` cannot cross the bridge. `name` names the argument in the message."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} is a {type(t).__name__}, but the bridge takes torch.Tensors (got {t!r}).")
    if type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        # A wrapper subclass (MaskedTensor, a FakeTensor of torch.compile's or torch.export's tracing):
        # no buffer of its own, so DLPack would export a pointer to nothing (garbage, or a segfault).
        raise TypeError(
            f"{name} is a {type(t).__name__}, a tensor subclass with its own __torch_dispatch__ and no plain "
            "buffer to hand to JAX. Pass a plain tensor; the bridge cannot run inside torch.export or "
            "AOT tracing (torch.compile works: the call is a graph break)."
        )
    if t.layout is not torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; the bridge takes dense tensors (call .to_dense()).")
    if t.dtype not in _DIFFERENTIABLE:
        raise TypeError(
            f"{name} has dtype {t.dtype}; the bridge takes floating or complex tensors. Convert it with "
            ".float() (or .double()), or close over integer data inside the JAX function."
        )
    if t.dtype in _NEEDS_X64 and not jax.config.read("jax_enable_x64"):
        raise TypeError(
            f"{name} has dtype {t.dtype}, which JAX supports only in 64-bit mode; call "
            "jax.config.update('jax_enable_x64', True) at startup, or pass a 32-bit tensor."
        )
    kind = t.device.type
    if kind == "cpu":
        return
    if kind == "cuda" and (t.device.index or 0) in _jax_gpu_ids():
        return
    raise ValueError(
        f"{name} is on device {t.device}, which JAX cannot see (JAX devices: {jax.devices()}). Move it "
        "with .cpu(), or install a JAX build for that device (e.g. jax[cuda12] for CUDA tensors)."
    )


def _export_error(e: RuntimeError) -> Exception:
    """A clear error for tensors that have no buffer to export, else `e` itself."""
    if "storage" not in str(e) and "Batching rule not implemented" not in str(e):
        return e
    return TypeError(
        "qfx.torch: a tensor crossing to JAX has no storage of its own. This happens under torch's "
        "legacy vmap (torch.autograd.grad(..., is_grads_batched=True), torch.autograd.functional.jacobian("
        "..., vectorize=True), forward-mode gradcheck of batched grads), which the bridge does not support: "
        "use torch.func.vmap, jacrev or jacfwd, which run one batched JAX call."
    )


def check_x64(tensors, where: str) -> None:
    """Raises when a 64-bit tensor would cross with x64 mode off, which JAX would compute in 32 bits
    without a word: for a backward or JVP whose forward ran before x64 mode was turned off."""
    if not jax.config.read("jax_enable_x64") and any(t.dtype in _NEEDS_X64 for t in tensors):
        raise TypeError(
            f"qfx.torch: {where} has 64-bit tensors, but JAX's x64 mode is off (it was on at the forward). "
            "Keep jax_enable_x64 on for as long as torch differentiates the call."
        )


# --- JAX functions as autograd.Functions -----------------------------------------------------------


# The JAX dtypes whose outputs torch differentiates: those of `_DIFFERENTIABLE` (not, e.g., float8, which
# torch's autograd refuses), so that the forward and the backward agree on which outputs have cotangents.
_DIFFERENTIABLE_JAX = frozenset(
    np.dtype(d) for d in (np.float16, jnp.bfloat16, np.float32, np.float64, np.complex64, np.complex128)
)


def _is_differentiable(dtype) -> bool:
    return np.dtype(dtype) in _DIFFERENTIABLE_JAX


def _restrict(flat_fn: Callable, primals, mask: tuple[bool, ...]) -> Callable:
    """`flat_fn` as a function of the primals selected by `mask`, the others held fixed."""

    def partial_fn(*selected):
        it = iter(selected)
        return flat_fn(*[next(it) if m else p for p, m in zip(primals, mask, strict=True)])

    return partial_fn


def _pull(pullback, outs_diff: tuple[bool, ...], out_avals, cts) -> tuple:
    """Torch cotangents in, torch gradients out, through a JAX pullback.

    For complex values torch's gradient is the conjugate of JAX's cotangent, so the cotangents are
    conjugated on the way in and the gradients on the way out (a no-op for real values). Outputs torch
    does not differentiate get zeros: JAX's float0 for integers, zeros of their dtype for others (float8).
    """

    def zeros(shape, dtype):
        return (
            jnp.zeros(shape, dtype)
            if jnp.issubdtype(dtype, jnp.inexact)
            else np.zeros(shape, jax.dtypes.float0)
        )

    cts = iter(cts)
    full = tuple(
        jnp.conj(next(cts)).astype(dtype) if d else zeros(shape, dtype)
        for d, (shape, dtype) in zip(outs_diff, out_avals, strict=True)
    )
    return tuple(jnp.conj(g) for g in pullback(full))


@jax.tree_util.register_pytree_node_class
class _Kept:
    """What a forward keeps for its backward, as JAX arrays (see "Immutability" above).

    `how` (static) is `("grads",)`: `arrays` are the torch-convention gradients of the one real scalar
    output, to be scaled by its cotangent; or `("vjp", treedef, layout, out_diff, out_avals)`: `arrays`
    are JAX's VJP residuals, the small ones packed into one flat buffer per dtype (`layout` says where
    each leaf is), so that ~100 residual buffers cross the `jit` boundary as a few.
    """

    def __init__(self, arrays, how):
        self.arrays = tuple(arrays)
        self.how = how

    def tree_flatten(self):
        return self.arrays, self.how

    @classmethod
    def tree_unflatten(cls, how, arrays):
        return cls(arrays, how)


# Residuals of at least this many bytes cross the `jit` boundary as they are: each buffer costs a small,
# fixed dispatch, while packing copies it, which for large residuals (a batch's states) costs far more
# (README.md, `benchmarks/torch_overhead.py`).
_PACK_MAX_BYTES = 1 << 14


def _keep_pullback(pullback, out_diff, out_avals, pack: bool) -> _Kept:
    leaves, treedef = jax.tree.flatten(pullback)
    if not pack:  # untraced (jit=False): nothing to gain
        return _Kept(leaves, ("vjp", treedef, None, out_diff, out_avals))
    groups: dict[Any, list] = {}
    arrays, layout = [], []  # (index in arrays or None for float0, offset or None when whole, shape)
    for leaf in leaves:
        leaf = jnp.asarray(leaf)
        if leaf.dtype == jax.dtypes.float0:
            layout.append((None, None, leaf.shape))
        elif leaf.size * leaf.dtype.itemsize >= _PACK_MAX_BYTES:
            layout.append((len(arrays), None, leaf.shape))
            arrays.append(leaf)
        else:
            group = groups.setdefault(leaf.dtype, [])
            layout.append((leaf.dtype, sum(x.size for x in group), leaf.shape))
            group.append(leaf.ravel())
    first = {dtype: len(arrays) + i for i, dtype in enumerate(groups)}  # the packed buffers go last
    layout = tuple(
        (first[where] if offset is not None else where, offset, shape) for where, offset, shape in layout
    )
    arrays += [jnp.concatenate(g) if len(g) > 1 else g[0] for g in groups.values()]
    return _Kept(arrays, ("vjp", treedef, layout, out_diff, out_avals))


def _kept_pullback(kept: _Kept):
    _, treedef, layout, _, _ = kept.how
    if layout is None:
        return jax.tree.unflatten(treedef, kept.arrays)
    leaves = [
        np.zeros(shape, jax.dtypes.float0)
        if where is None
        else kept.arrays[where]
        if offset is None
        else kept.arrays[where][offset : offset + math.prod(shape)].reshape(shape)
        for where, offset, shape in layout
    ]
    return jax.tree.unflatten(treedef, leaves)


def _linear_in_cotangent(pullback) -> bool:
    """Whether a `jax.vjp` pullback is certainly linear in its cotangent: its linear program (a jaxpr the
    pullback holds; a private structure of JAX's) has no `custom_vjp` backward (`custom_lin`), which may
    be non-linear (JAX's own gradient-clipping example is). False when that program cannot be found."""
    programs = [
        a.jaxpr if isinstance(a, jax.extend.core.ClosedJaxpr) else a
        for a in getattr(getattr(pullback, "fun", None), "args", ())
        if isinstance(a, (jax.extend.core.Jaxpr, jax.extend.core.ClosedJaxpr))
    ]

    def custom(jaxpr) -> bool:
        return any(
            eqn.primitive.name == "custom_lin"
            or any(custom(sub) for sub in jax.extend.core.jaxprs_in_params(eqn.params))
            for eqn in jaxpr.eqns
        )

    return bool(programs) and not any(custom(j) for j in programs)


def _pull_kept(kept: _Kept, *cts) -> tuple:
    """The backward of a forward that kept its VJP residuals (torch's convention, as `_pull`)."""
    _, _, _, out_diff, out_avals = kept.how
    return _pull(_kept_pullback(kept), out_diff, out_avals, cts)


# How `Bridge.apply` tells `forward` (and `forward` tells `setup_context`) to keep what the backward needs:
# torch's `Function.apply` passes only the arguments, and runs `forward` with grad mode off.
_handoff = threading.local()


# torch's forward-over-reverse (torch.func.hessian, jacfwd of jacrev) also takes the forward mode of the
# function itself, unlike jax.hessian; a method with a reverse rule only (qfx.diff.Adjoint) cannot give it.
_FORWARD_MODE_IN_TORCH = (
    "qfx.torch: torch's forward mode (torch.func.jvp, jacfwd, and hessian, which is jacfwd of jacrev) needs "
    "the forward-mode derivative of the JAX function itself, which it does not have. For a Hessian use "
    "torch.autograd.grad twice with create_graph=True, torch.func.jacrev of torch.func.jacrev, or "
    "torch.autograd.functional.hessian. JAX said: "
)


class Bridge:
    """A flat JAX function `f(*arrays) -> tuple of arrays` as a `torch.autograd.Function`.

    Its derivatives are again `Bridge`s, made on first use and kept: the VJP (per set of inputs that need a
    gradient), the JVP (per set of inputs that have a tangent) and the vmapped function (per `in_dims`).
    Because the backward calls the VJP bridge, torch records a graph through it under `create_graph=True`,
    so derivatives of any order work; because `vmap` calls the vmapped bridge, `torch.func.vmap`, `jacrev`
    and `jacfwd` run one batched JAX call.

    **Forward and backward.** When torch records a graph (grad mode on, some input requires grad, outside
    `torch.func`), the forward runs one compiled `jax.vjp` and keeps, as JAX arrays on the autograd node,
    either the gradients themselves (a single real scalar output of a function without a `jax.custom_vjp`:
    the forward is then one fused value-and-grad, and the backward scales them by the output's cotangent,
    exact for a VJP linear in it) or JAX's VJP residuals, the small
    ones packed into one buffer per dtype; a first-order backward applies them in one more compiled call,
    without running the forward again. A backward under `create_graph=True` (and any backward inside
    `torch.func`) instead calls the VJP bridge, which re-runs the forward inside one compiled call: a function
    of the torch inputs, so torch can differentiate it again. The kept path's two compiled calls cost
    little more than one fused `jax.value_and_grad`, and less than re-running the forward in the backward
    would (measurements: README.md, `benchmarks/torch_overhead.py`).
    """

    def __init__(self, flat_fn: Callable, jit: bool):
        self.flat_fn = flat_fn
        self.jit = jit
        # jax.jit compiles once per input shape, dtype and device (and per JAX config, e.g. x64 mode) and
        # caches. (An AOT-compiled executable per shape would save a little dispatch on each call but
        # would silently ignore later config changes; see README.md.)
        self.call = jax.jit(flat_fn) if jit else flat_fn
        self._vjps: dict[tuple, Bridge] = {}
        self._keeps: dict[tuple[bool, ...], Callable] = {}
        # A closure per bridge, not `jax.jit(_pull_kept)`: JAX caches compilations per function, and the
        # module-level function would keep every bridge's (whose static part holds the pullback's jaxpr)
        # for the life of the process, for every TorchLayer ever made (see README.md).
        self._pull_kept = jax.jit(lambda kept, *cts: _pull_kept(kept, *cts)) if jit else _pull_kept
        self._jvps: dict[tuple[bool, ...], Bridge] = {}
        self._vmaps: dict[tuple[int | None, ...], Bridge] = {}
        self.function = _make_function(self)
        self._c_apply = None if _C_APPLY is None else _C_APPLY.__get__(None, self.function)

    def apply(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`self.function.apply(*tensors)`.

        Outside `torch.func` transforms, torch's Python `Function.apply` binds the arguments to the
        signature of `forward` (no defaults here), unwraps dead functorch wrappers and calls the C++
        `apply`; doing the same directly skips its general-purpose Python path (see README.md). Inside
        transforms it is called as is.
        """
        if self._c_apply is None or _transforms_active():
            return self.function.apply(*tensors)
        tensors = [_unwrap_if_dead(t) for t in tensors]
        if torch.is_grad_enabled():
            needs = tuple(t.requires_grad for t in tensors)
            if any(needs):  # torch will record a graph: the forward keeps what the backward needs
                _handoff.needs = needs
                try:
                    return self._c_apply(*tensors)
                finally:
                    _handoff.needs = _handoff.kept = None
        if not _dual_level():
            # Nothing to record (no graph, no dual tensors outside a `dual_level`): the autograd node
            # would be dropped at once, so the forward runs without making it (see README.md).
            return self.forward(*tensors)
        return self._c_apply(*tensors)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        placement, device = _placement(tensors)
        to_jax, to_torch = _converters(tensors) if tensors else (None, None)
        try:
            if to_jax is not None and self.jit and tensors[0].is_cpu:
                arrays = [_cpu_argument(_prepare(t), to_jax) for t in tensors]
            else:
                arrays = [to_jax(_prepare(t)) if to_jax else tensor_to_jax(t) for t in tensors]
        except RuntimeError as e:
            raise _export_error(e) from e
        needs = getattr(_handoff, "needs", None)
        with placement:
            if needs is None:
                outs = self.call(*arrays)
            else:
                _handoff.needs = None
                outs, kept = self.keeping(needs)(*arrays)
                _handoff.kept = (needs, kept)
        if not self.jit and device is not None:
            # An untraced function may return what it did not make there (a closed-over array, a NumPy
            # value): results come back on the inputs' device all the same.
            outs = [jax.device_put(o, device) for o in outs]
        seen = {t.data_ptr() for t in tensors}
        result = []
        for o in outs:
            t = to_torch(o) if to_torch and isinstance(o, jax.Array) else jax_to_tensor(o)
            if t.numel():
                ptr = t.data_ptr()
                if ptr in seen:  # JAX forwarded an input (or one array twice): keep tensors independent
                    t = t.clone()
                seen.add(ptr)
            result.append(t)
        if not self.jit:  # an untraced function may return an array it did not make (a closed-over one)
            result = [t.clone() for t in result]
        return tuple(result)

    def keeping(self, needs: tuple[bool, ...]) -> Callable:
        """f_keep(*primals) -> (outputs, `_Kept`): the forward that keeps what a first-order backward
        needs for the inputs selected by `needs` (one compiled call)."""
        if needs not in self._keeps:
            flat_fn, pack = self.flat_fn, self.jit

            def f_keep(*primals):
                wrt = [p for p, m in zip(primals, needs, strict=True) if m]
                outs, pullback = jax.vjp(_restrict(flat_fn, primals, needs), *wrt)
                out_diff = tuple(_is_differentiable(o.dtype) for o in outs)
                out_avals = tuple((o.shape, o.dtype) for o in outs)
                diff = [o for o, d in zip(outs, out_diff, strict=True) if d]
                if (
                    len(diff) == 1
                    and diff[0].size == 1
                    and jnp.issubdtype(diff[0].dtype, jnp.floating)
                    and jnp.finfo(diff[0].dtype).bits >= 32
                    and all(jnp.finfo(w.dtype).bits >= 32 for w in wrt)
                    and _linear_in_cotangent(pullback)
                ):
                    # A scalar loss (of any shape with one entry): its VJP is linear in the one real
                    # cotangent, so compute the gradients now, fused with the forward, and let the backward
                    # scale them. Not when the loss or an input is float16 or bfloat16: a gradient for a unit
                    # cotangent can underflow or overflow there where the one for the real cotangent (a loss
                    # scale) does not, and torch would multiply it by the cotangent in that low precision.
                    # Nor when the function has a `jax.custom_vjp`, whose backward JAX lets be non-linear
                    # in its cotangent (gradient clipping): then the backward applies the real one.
                    seed = jnp.ones(diff[0].shape, diff[0].dtype)
                    grads = _pull(pullback, out_diff, out_avals, (seed,))
                    return outs, _Kept(grads, ("grads",))
                return outs, _keep_pullback(pullback, out_diff, out_avals, pack)

            self._keeps[needs] = jax.jit(f_keep) if self.jit else f_keep
        return self._keeps[needs]

    def pull_kept(self, kept: _Kept, cts) -> tuple[torch.Tensor, ...]:
        """Torch gradients of the inputs a forward kept `kept` for, given torch cotangents of its
        differentiable outputs."""
        to_jax, to_torch = _converters(cts) if cts else (None, None)
        if kept.how[0] == "grads":
            (ct,) = cts
            ct = ct.reshape(())
            return tuple(ct * (to_torch(g) if to_torch else jax_to_tensor(g)) for g in kept.arrays)
        try:
            arrays = [to_jax(_prepare(c)) if to_jax else tensor_to_jax(c) for c in cts]
        except RuntimeError as e:
            raise _export_error(e) from e
        with _placement(cts)[0]:
            grads = self._pull_kept(kept, *arrays)
        seen = {c.data_ptr() for c in cts}
        result = []
        for g in grads:
            t = to_torch(g) if to_torch and isinstance(g, jax.Array) else jax_to_tensor(g)
            if t.numel():
                if t.data_ptr() in seen:  # a pullback may return a cotangent as it is (y = x)
                    t = t.clone()
                seen.add(t.data_ptr())
            result.append(t)
        return tuple(result)

    def vjp(self, needs: tuple[bool, ...], out_diff: tuple[bool, ...]) -> "Bridge":
        """f_vjp(*primals, *cotangents of the differentiable outputs) -> gradients of the needed inputs,
        in torch's convention (see `_pull`)."""
        key = (needs, out_diff)
        if key not in self._vjps:
            n = len(needs)
            flat_fn = self.flat_fn

            def f_vjp(*args):
                primals, cts = args[:n], args[n:]
                outs, pullback = jax.vjp(
                    _restrict(flat_fn, primals, needs), *[p for p, m in zip(primals, needs, strict=True) if m]
                )
                return _pull(pullback, out_diff, [(o.shape, o.dtype) for o in outs], cts)

            self._vjps[key] = Bridge(f_vjp, self.jit)
        return self._vjps[key]

    def jvp(self, has: tuple[bool, ...]) -> "Bridge":
        """f_jvp(*primals, *given tangents) -> tangents of the differentiable outputs (torch and JAX
        agree on forward-mode conventions, complex included)."""
        if has not in self._jvps:
            n = len(has)
            flat_fn = self.flat_fn

            def f_jvp(*args):
                primals, tangents = args[:n], args[n:]
                wrt = [p for p, h in zip(primals, has, strict=True) if h]
                tangents = tuple(t.astype(w.dtype) for t, w in zip(tangents, wrt, strict=True))
                try:
                    outs, out_tangents = jax.jvp(_restrict(flat_fn, primals, has), tuple(wrt), tangents)
                except TypeError as e:
                    if "forward-mode" not in str(e):
                        raise
                    raise TypeError(_FORWARD_MODE_IN_TORCH + str(e)) from e
                return tuple(
                    t for o, t in zip(outs, out_tangents, strict=True) if _is_differentiable(o.dtype)
                )

            self._jvps[has] = Bridge(f_jvp, self.jit)
        return self._jvps[has]

    def vmap(self, in_dims: tuple[int | None, ...]) -> "Bridge":
        """The same function mapped over `in_dims` by `jax.vmap`, outputs batched on axis 0."""
        if in_dims not in self._vmaps:
            self._vmaps[in_dims] = Bridge(jax.vmap(self.flat_fn, in_axes=in_dims, out_axes=0), self.jit)
        return self._vmaps[in_dims]


def _dual_level() -> bool:
    """Whether a `torch.autograd.forward_ad.dual_level` may be active: torch's private attribute, and True
    when it is absent."""
    return getattr(_forward_ad, "_current_level", 0) >= 0


def _make_function(bridge: Bridge) -> type[torch.autograd.Function]:
    # The methods that run JAX are `torch.compiler.disable`d (a negligible cost a call): under
    # `torch.compile`, the `torch.func` transforms call them from frames TorchDynamo would otherwise trace,
    # into JAX itself.
    class JaxFunction(torch.autograd.Function):
        @staticmethod
        @torch.compiler.disable
        def forward(*tensors):
            return bridge.forward(*tensors)

        @staticmethod
        def setup_context(ctx, inputs, output):
            kept = getattr(_handoff, "kept", None)
            _handoff.kept = None
            ctx.n_inputs = len(inputs)
            if kept is None:
                ctx.save_for_backward(*inputs)
            else:
                # Held by an empty tensor saved with the inputs, so that torch frees it with them after
                # the backward (unless retain_graph=True), not when the graph's last output dies.
                holder = torch.empty(0)
                holder.qfx_kept = kept
                ctx.save_for_backward(*inputs, holder)
            ctx.save_for_forward(*inputs)
            ctx.out_diff = tuple(o.dtype in _DIFFERENTIABLE for o in output)
            if not all(ctx.out_diff):
                ctx.mark_non_differentiable(*[o for o, d in zip(output, ctx.out_diff, strict=True) if not d])

        @staticmethod
        @torch.compiler.disable
        def backward(ctx, *grads):
            needs = tuple(ctx.needs_input_grad)
            if not any(needs):
                return (None,) * len(needs)
            saved = ctx.saved_tensors  # raises if an input was written in place since the forward
            primals = saved[: ctx.n_inputs]
            check_x64(primals, "the backward")
            # Missing if saved-tensor hooks (e.g. torch.autograd.graph.save_on_cpu) replaced the holder.
            kept = getattr(saved[-1], "qfx_kept", None) if len(saved) > ctx.n_inputs else None
            cts = [g for g, d in zip(grads, ctx.out_diff, strict=True) if d]
            if kept is not None and kept[0] == needs and not torch.is_grad_enabled() and not _dual_level():
                # First order (no create_graph, no dual_level: the kept residuals know nothing of tangents,
                # so forward-over-reverse needs the VJP bridge, whose JVP torch applies): apply them.
                out = iter(bridge.pull_kept(kept[1], cts))
            else:  # differentiable again: the VJP as a bridge of the torch inputs
                out = iter(bridge.vjp(needs, ctx.out_diff).apply(*primals, *cts))
            return tuple(next(out) if need else None for need in needs)

        @staticmethod
        @torch.compiler.disable
        def jvp(ctx, *tangents):
            primals = ctx.saved_tensors
            has = tuple(t is not None for t in tangents)
            if not any(has):
                return tuple(None for _ in ctx.out_diff)
            given = [t for t in tangents if t is not None]
            check_x64(primals, "the forward-mode derivative")
            out = iter(bridge.jvp(has).apply(*primals, *given))
            return tuple(next(out) if d else None for d in ctx.out_diff)

        @staticmethod
        @torch.compiler.disable
        def vmap(info, in_dims, *tensors):
            outs = bridge.vmap(tuple(in_dims)).apply(*tensors)
            return outs, (0,) * len(outs)

    # Under torch.func transforms, torch's `Function.apply` binds the arguments with
    # `inspect.signature(forward)` on every call, which is slow; a precomputed signature is nearly free.
    JaxFunction.forward.__signature__ = inspect.signature(JaxFunction.forward)
    return JaxFunction
