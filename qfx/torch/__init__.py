"""The Torch bridge: qfx circuits (and any JAX function of arrays) inside torch models.

```python
import qfx.torch  # imports torch; `import qfx` alone never does
```

- `to_torch(fn)` turns a JAX function of arrays into a torch callable, differentiable to any order and
  composable with `torch.func` (`grad`, `vmap`, `jacrev`, `jacfwd`, `hessian`).
- `TorchLayer(circuit_fn, weight_shapes)` is a `torch.nn.Module` whose weights are `nn.Parameter`s; a batch
  of inputs runs as one vmapped JAX call.
- `to_jax` / `from_jax` move single tensors across by DLPack.
- `straight_through_argmax` / `ArgMax` read out the most likely class with a straight-through gradient.

**Copies.** Tensors cross by DLPack without copying, except for non-contiguous views, buffers that are not
64-byte aligned, tensors with a lazy conjugate / negative bit, outputs that alias an input, outputs of an
untraced (`jit=False`) function, and small CPU inputs (at most 64 KiB) of a call, which are cheaper to copy
than to import; see
`qfx/torch/_bridge.py` for the rules and why they keep JAX's immutability.

**Devices.** A call runs where its input tensors are and returns its results there: CUDA tensors on their
GPU (torch's current stream and JAX's are ordered both ways, so nothing waits on the host), CPU tensors on
JAX's CPU device even when JAX's default device is a GPU. Inputs on different devices raise an error.

**Complex numbers.** For a real loss L of z = x + iy, torch's gradient is dL/dx + i dL/dy (so that
`z - lr * z.grad` descends) and JAX's is its conjugate, dL/dx - i dL/dy; the bridge conjugates
cotangents on the way in and gradients on the way out, so `z.grad` follows torch's convention and
`torch.autograd.gradcheck` passes on complex inputs and outputs.

**Precision.** float64 and complex128 tensors need JAX's 64-bit mode
(`jax.config.update("jax_enable_x64", True)`); otherwise the bridge raises instead of silently casting.

**Tracing.** Under `torch.compile` a bridged call runs outside TorchDynamo's graph (a graph break), eagerly,
also inside `torch.func` transforms (the bridge's `autograd.Function` methods are `torch.compiler.disable`d).
`torch.jit.trace` and `make_fx`-based tracing (`torch.func.linearize`) raise: they would record the JAX
call's outputs as constants. With torch < 2.12, `torch.func.vjp` and `jacrev` of a bridged call inside
`torch.compile` raise too: those versions silently return zero gradients there (see `_refuse_compiled_vjp`).

**CPU threads.** torch's OpenMP workers busy-wait for a while after each parallel op, competing with XLA's
threads for the same cores; with small classical layers, `torch.set_num_threads(1)` (or
`OMP_WAIT_POLICY=PASSIVE` in the environment) made hybrid training steps many times faster on a busy
machine (see `qfx/torch/README.md`).
"""

from collections.abc import Callable, Mapping, Sequence
import math
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .._straight_through import straight_through_argmax as _jax_straight_through_argmax
from ._bridge import Bridge, check_tensor, jax_to_tensor, tensor_to_jax

try:  # torch >= 2.3; older ones are not refused under make_fx tracing
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
except ImportError:  # pragma: no cover

    def get_proxy_mode():
        return None


__all__ = ["ArgMax", "TorchLayer", "from_jax", "straight_through_argmax", "to_jax", "to_torch"]


def to_jax(tensor: torch.Tensor) -> jax.Array:
    """A torch tensor as a JAX array on the same device, by DLPack.

    Zero-copy for a contiguous, 64-byte aligned tensor (the JAX array then shares torch's buffer: do not
    write the tensor in place while you use the array); a copy otherwise. Tensors that require grad are
    detached.

    **Raises:** `TypeError` for integer, boolean or (without x64 mode) 64-bit tensors, `ValueError` for a
    device JAX cannot see.
    """
    check_tensor(tensor, "to_jax: the tensor")
    return tensor_to_jax(tensor)


def from_jax(array: jax.Array) -> torch.Tensor:
    """A JAX array as a torch tensor on the same device, by DLPack, zero-copy.

    The tensor shares the array's buffer: writing it in place changes the JAX array too (which JAX
    assumes immutable), so `.clone()` it first if you will."""
    if not isinstance(array, jax.Array):
        raise TypeError(f"from_jax: expected a jax.Array, got {type(array).__name__}.")
    if jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key):
        raise TypeError("from_jax: a PRNG key array has no DLPack form; pass jax.random.key_data(key).")
    return jax_to_tensor(array)


def _fn_name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _arg_name(where: str, path) -> str:
    return f"{where}: argument {jax.tree_util.keystr(path)}" if path else f"{where}: the argument"


def _signature(leaves) -> tuple:
    return tuple((tuple(t.shape), t.dtype) for t in leaves)


class _Entry:
    """One input structure of a `to_torch` function: its bridge and the output structures it made."""

    def __init__(self, fn: Callable, in_tree, jit: bool):
        self.out_trees: dict[tuple, Any] = {}
        self.only_out_tree = None

        def flat_fn(*arrays):
            out = fn(*jax.tree.unflatten(in_tree, arrays))
            leaves, out_tree = jax.tree.flatten(out)
            # Recorded at trace time, keyed by the input signature (the shapes and dtypes a traced call
            # sees are those the torch tensors report, vmapped axes excluded).
            key = tuple((tuple(a.shape), _TORCH_DTYPES[np.dtype(a.dtype)]) for a in arrays)
            self.out_trees[key] = out_tree
            self.only_out_tree = out_tree if len(set(self.out_trees.values())) == 1 else None
            for leaf in leaves:
                if not isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
                    raise TypeError(
                        "to_torch: the function must return arrays (or a pytree of arrays), but it "
                        f"returned a {type(leaf).__name__} leaf."
                    )
                if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                    raise TypeError(
                        f"to_torch: the function returned a PRNG key array (dtype {leaf.dtype}), which torch "
                        "has no dtype for; return jax.random.key_data(key) instead."
                    )
            return tuple(jnp.asarray(x) for x in leaves)

        self.bridge = Bridge(flat_fn, jit)

    def out_tree(self, leaves):
        if self.only_out_tree is not None:
            return self.only_out_tree
        return self.out_trees[_signature(leaves)]


_TORCH_DTYPES = {
    np.dtype(np.float16): torch.float16,
    np.dtype(jnp.bfloat16): torch.bfloat16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}


class _TorchFunction:
    """The callable returned by `to_torch`."""

    def __init__(self, fn: Callable, jit: bool):
        self.fn = fn
        self.jit = jit
        self._entries: dict[Any, _Entry] = {}
        self.__name__ = self.__qualname__ = f"to_torch({_fn_name(fn)})"
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"{self.__name__}: pass the arguments positionally (got keyword arguments "
                f"{', '.join(kwargs)}); bind non-tensor ones into the function with functools.partial."
            )
        if torch.compiler.is_compiling():  # TorchDynamo cannot trace JAX: run the call outside its graph
            return torch.compiler.disable(self._compiled_call)(*args)
        _refuse_tracing(self.__name__)
        _refuse_compiled_vjp(self.__name__)
        return self._call(*args)

    def _compiled_call(self, *args: Any) -> Any:
        _refuse_compiled_vjp(self.__name__, compiled=True)
        return self._call(*args)

    def _call(self, *args: Any) -> Any:
        leaves, in_tree = jax.tree.flatten(args)
        for leaf in leaves:  # a fast check; the slow one names the bad argument
            if not _fast_ok(leaf):
                self._check(args)
                break
        if not leaves:
            raise TypeError(f"{self.__name__}: call it with at least one torch.Tensor argument.")
        entry = self._entries.get(in_tree)
        if entry is None:
            entry = self._entries[in_tree] = _Entry(self.fn, in_tree, self.jit)
        outs = entry.bridge.apply(*leaves)
        return jax.tree.unflatten(entry.out_tree(leaves), outs)

    def _check(self, args) -> None:
        for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
            check_tensor(leaf, _arg_name(self.__name__, path))

    def __repr__(self):
        return f"<qfx.torch.{self.__name__}>"

    def __reduce__(self):  # pickles (and deep-copies) as a fresh wrapper of the same function
        return (_rebuild, (self.fn, self.jit))


def _refuse_tracing(name: str) -> None:
    """Raises under `torch.jit.trace` and `make_fx` tracing (`torch.func.linearize`, ...), which would record
    the JAX call's outputs as constants: wrong derivatives, silently."""
    if torch.jit.is_tracing() or (torch._C._len_torch_dispatch_stack() and get_proxy_mode() is not None):
        raise RuntimeError(
            f"{name}: torch.jit.trace and make_fx-based tracing (torch.func.linearize, ...) cannot see "
            "inside a JAX call and would record its outputs as constants. Call it eagerly, under "
            "torch.func transforms (grad, vmap, jacrev, jacfwd, jvp), or in torch.compile (a graph break)."
        )


# torch < 2.12: when a graph break (every bridged call is one) falls inside `torch.func.vjp` (also inside
# `jacrev`), TorchDynamo traces the code after it, which calls the returned `vjp_fn`, with the forward's
# outputs lifted to graph inputs that have lost their `grad_fn`: the gradients come out as zeros, silently
# (pytorch/pytorch#172386; torch 2.12 graph-breaks there instead, which gives the right numbers).
_COMPILED_VJP_LOSES_GRADIENTS = torch.__version__ < (2, 12)
try:
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _dynamo_callback

    _GRAD = torch._C._functorch.TransformType.Grad
except (ImportError, AttributeError):  # pragma: no cover - older torch: no check
    _COMPILED_VJP_LOSES_GRADIENTS = False


def _refuse_compiled_vjp(name: str, compiled: bool = False) -> None:
    """Raises, with torch < 2.12, for a call inside `torch.func.vjp` (or `jacrev`) under `torch.compile`
    when that vjp is the only transform active: the case whose gradients can come out as zeros.

    `compiled`: the call comes from a traced frame (through `torch.compiler.disable`); otherwise TorchDynamo
    may be running the frames around it eagerly after a graph break, and its callback is then set. Inside
    another transform (`hessian`, `jacrev` of `jacrev`, `vmap` of `jacrev`) the vjp's caller runs eagerly
    and the numbers are right; `grad` applies its vjp in the same frame. Whether the code after the vjp
    is traced is not visible from here, so this also refuses some calls that come out right (e.g. where
    the vjp'd function's output is a view, which TorchDynamo 2.11 does not trace): the message says how
    to run the transform eagerly."""
    if not _COMPILED_VJP_LOSES_GRADIENTS:
        return
    levels = torch._C._functorch.get_interpreter_stack()  # None outside every transform
    if not levels or len(levels) != 1 or levels[0].key() != _GRAD:
        return
    if not compiled and _dynamo_callback() in (None, False):
        return
    frame = sys._getframe(1)
    while frame is not None:
        if "_vjp_with_argnums" in frame.f_code.co_name:  # torch.func.vjp's body (jacrev calls it too)
            raise RuntimeError(
                f"{name}: torch {torch.__version__} can compute torch.func.vjp and jacrev of a call that "
                "graph-breaks inside torch.compile (every JAX call does) as zeros, silently "
                "(pytorch/pytorch#172386). Upgrade to torch >= 2.12, use torch.func.jacfwd or grad, or "
                "run the transform eagerly: torch.compiler.disable(torch.func.jacrev(f))(...)."
            )
        frame = frame.f_back


def _rebuild(fn, jit):
    return to_torch(fn, jit=jit)


_OK_32 = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.complex64})
_OK_X64 = _OK_32 | {torch.float64, torch.complex128}


def _fast_ok(t) -> bool:
    """A quick sufficient check that `t` can cross the bridge (`check_tensor` is the full one)."""
    ok = _OK_X64 if jax.config.read("jax_enable_x64") else _OK_32
    plain = type(t) is torch.Tensor or type(t) is torch.nn.Parameter  # not a subclass with its own dispatch
    return plain and t.is_cpu and t.dtype in ok and t.layout is torch.strided


def to_torch(fn: Callable, *, jit: bool = True) -> Callable:
    """Wraps a JAX function of arrays as a torch callable, differentiable to any order.

    **Arguments:**

    - `fn`: a JAX function whose arguments are pytrees of arrays (e.g. `weights, inputs`) and which
      returns an array or a pytree of arrays. Call the result with torch tensors in the same places.
    - `jit`: compile `fn` with `jax.jit` (once per input shape and dtype, then cached). Pass `jit=False`
      for a function that cannot be traced.

    **Returns:** a callable taking torch tensors and returning torch tensors (on the inputs' device), backed
    by a `torch.autograd.Function` with `setup_context`, `backward`, `jvp` and `vmap`, so that
    `loss.backward()`, `torch.autograd.grad(..., create_graph=True)` to any order, `torch.func.grad`,
    `torch.func.vmap` (one `jax.vmap`ped call), `jacrev`, `jacfwd` and `hessian` work.

    When torch records a graph, the forward is one compiled `jax.vjp` that keeps JAX's residuals (for a
    scalar output: the gradients, computed with the value, unless `fn` has a `jax.custom_vjp`, whose
    backward may be non-linear in its cotangent), and a first-order `.backward()` applies them
    without running `fn` again. Under `create_graph=True` the backward instead re-runs `fn` inside the
    compiled VJP, a function of the torch inputs that torch can differentiate again. (So a forward with
    grad enabled costs more than one under `torch.no_grad()`: evaluate under `no_grad`.)

    ```python
    import jax.numpy as jnp, qfx, qfx.torch, torch

    def energy(theta):  # theta: (2,)
        circ = qfx.Circuit([qfx.RX(theta[0], wires=0), qfx.RY(theta[1], wires=1), qfx.CNOT((0, 1))])
        return qfx.expval(circ, qfx.Z(0) @ qfx.Z(1))

    f = qfx.torch.to_torch(energy)
    theta = torch.tensor([0.1, 0.2], requires_grad=True)
    f(theta).backward()  # theta.grad == jax.grad(energy)(jnp.array([0.1, 0.2]))
    ```
    """
    if not callable(fn):
        raise TypeError(f"to_torch: expected a callable JAX function, got {fn!r}.")
    return _TorchFunction(fn, jit)


# --- TorchLayer -----------------------------------------------------------------------------------


# Attributes of a TorchLayer instance and the forward's argument: weights cannot take these names.
_RESERVED = ("inputs", "diff", "circuit_fn", "weight_shapes", "training")


def _check_weight_shapes(weight_shapes) -> dict[str, tuple[int, ...]]:
    if not isinstance(weight_shapes, Mapping) or not weight_shapes:
        raise TypeError(
            "TorchLayer: weight_shapes must be a non-empty dict of name -> shape, e.g. "
            f"{{'theta': (3, 2)}}, got {weight_shapes!r}."
        )
    shapes = {}
    for name, shape in weight_shapes.items():
        if not isinstance(name, str) or not name.isidentifier() or "." in name:
            raise ValueError(f"TorchLayer: weight name {name!r} is not a valid Python identifier.")
        if hasattr(torch.nn.Module, name) or name in _RESERVED or name.startswith("_"):
            raise ValueError(f"TorchLayer: weight name {name!r} is reserved; choose another name.")
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)
        if not isinstance(shape, Sequence) or not all(
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in shape
        ):
            raise ValueError(
                f"TorchLayer: weight_shapes[{name!r}] must be an int or a tuple of non-negative ints, "
                f"got {shape!r}."
            )
        shapes[name] = tuple(int(s) for s in shape)
    return shapes


class _Batched:
    """`circuit_fn` over a batch of inputs, as one `jax.vmap`. A class, so that layers pickle."""

    def __init__(self, circuit_fn: Callable, diff: Any):
        self.circuit_fn = circuit_fn
        self.kwargs = {} if diff is None else {"diff": diff}
        self.__name__ = _fn_name(circuit_fn)

    def __call__(self, inputs, weights):
        out = jax.vmap(lambda x: self.circuit_fn(x, **weights, **self.kwargs))(inputs)
        if isinstance(out, jax.Array) and jnp.issubdtype(out.dtype, jnp.floating):
            out = out.astype(inputs.dtype)  # a module's output has its inputs' dtype, even under x64
        return out


def _default_init(tensor: torch.Tensor) -> None:
    """Angles uniform in [0, 2 pi)."""
    torch.nn.init.uniform_(tensor, 0.0, 2 * math.pi)


class TorchLayer(torch.nn.Module):
    """A quantum circuit as a `torch.nn.Module`, with its weights as `torch.nn.Parameter`s.

    **Arguments:**

    - `circuit_fn`: a JAX function `circuit_fn(inputs, **weights) -> array` for ONE sample: `inputs` has
      shape `(d,)`, each weight the shape given in `weight_shapes`. It may return any shape `S`.
    - `weight_shapes`: dict of weight name -> shape (an int or a tuple), e.g. `{"theta": (layers, n)}`.
    - `init`: how to initialise the weights: a function applied in place to each parameter (like
      `torch.nn.init.normal_`), or a dict of name -> initial tensor (or such a function). Default: angles
      uniform in `[0, 2 pi)`.
    - `diff`: a `qfx.diff` method. If given, it is passed to `circuit_fn` as the keyword `diff=`, which
      should forward it to `qfx.expval` and co.; if omitted `circuit_fn` is called without it.
    - `dtype`, `device`: of the parameters (default: torch's default dtype, CPU).
    - `jit`: compile with `jax.jit` (default), once per input shape and dtype.

    **Calling:** `layer(inputs)` with `inputs` of shape `(*batch, d)` returns `(*batch, *S)`, real outputs in
    the dtype of `inputs` (qfx itself computes in float64 under x64 mode). The batch is flattened and run
    as ONE `jax.vmap`ped call, never a Python loop; gradients flow to the inputs and to the weights.
    `state_dict`, `load_state_dict` and `torch.optim` work as for any module.

    ```python
    import jax.numpy as jnp, qfx, qfx.torch, torch

    def circuit(inputs, theta, diff=qfx.diff.Backprop()):  # inputs: (2,), theta: (2, 2)
        ops = [qfx.RY(inputs[0], wires=0), qfx.RY(inputs[1], wires=1)]
        for layer in theta:
            ops += [qfx.RX(layer[0], wires=0), qfx.RX(layer[1], wires=1), qfx.CNOT((0, 1))]
        return qfx.expval(qfx.Circuit(ops), [qfx.Z(0), qfx.Z(1)], diff=diff)

    layer = qfx.torch.TorchLayer(circuit, {"theta": (2, 2)}, diff=qfx.diff.Backprop())
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), layer, torch.nn.Linear(2, 3))
    logits = model(torch.randn(32, 4))  # (32, 3); the 32 circuits run as one vmapped JAX call
    ```
    """

    def __init__(
        self,
        circuit_fn: Callable,
        weight_shapes: Mapping[str, int | Sequence[int]],
        *,
        init: Callable | Mapping[str, Any] | None = None,
        diff: Any = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        jit: bool = True,
    ):
        super().__init__()
        if not callable(circuit_fn):
            raise TypeError(f"TorchLayer: circuit_fn must be a callable JAX function, got {circuit_fn!r}.")
        shapes = _check_weight_shapes(weight_shapes)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"TorchLayer: dtype must be a floating torch dtype (weights), got {dtype!r}.")
        inits = init if isinstance(init, Mapping) else {}
        unknown = set(inits) - set(shapes)
        if unknown:
            raise ValueError(
                f"TorchLayer: init names {sorted(unknown)}, which are not in weight_shapes "
                f"({sorted(shapes)})."
            )
        for name, shape in shapes.items():
            how = inits.get(name, init if callable(init) else _default_init)
            if callable(how):
                value = torch.empty(shape, dtype=dtype, device=device)
                with torch.no_grad():
                    made = how(value)  # in place, like torch.nn.init.*_; a function may return a new tensor
                if isinstance(made, torch.Tensor) and made is not value:
                    value = made.detach().clone()
                elif made is not None and not isinstance(made, torch.Tensor):
                    raise TypeError(
                        f"TorchLayer: init for {name!r} must fill its tensor in place (or return a tensor), "
                        f"got {type(made).__name__}."
                    )
            else:
                value = torch.as_tensor(how, device=device).clone()
            # Given values (NumPy's float64, Python ints) take the layer's dtype, torch's default if none.
            real = torch.get_default_dtype()
            value = value.to(device, dtype or (value.dtype if value.is_complex() else real))
            if tuple(value.shape) != shape:
                raise ValueError(
                    f"TorchLayer: init[{name!r}] has shape {tuple(value.shape)}, but "
                    f"weight_shapes[{name!r}] is {shape}."
                )
            self.register_parameter(name, torch.nn.Parameter(value))
        self.circuit_fn = circuit_fn
        self.weight_shapes = shapes
        self.diff = diff
        self._fn = to_torch(_Batched(circuit_fn, diff), jit=jit)

    def __prepare_scriptable__(self):
        # torch.jit.script calls this on every submodule before compiling it: say why it cannot work here,
        # instead of TorchScript's complaint about the signature of torch.compiler.disable.
        raise RuntimeError(
            f"TorchLayer({_fn_name(self.circuit_fn)}): torch.jit.script cannot compile a layer that calls "
            "JAX. Use the model eagerly, under torch.func transforms, or with torch.compile (the layer is "
            "a graph break; not with fullgraph=True)."
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # as in `to_torch`: outside TorchDynamo's graph
            return torch.compiler.disable(self._forward)(inputs)
        return self._forward(inputs)

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not _fast_ok(inputs) or inputs.ndim == 0:
            name = f"TorchLayer({_fn_name(self.circuit_fn)}): inputs"
            check_tensor(inputs, name)
            if inputs.ndim == 0:
                raise ValueError(f"{name} must have shape (batch..., d) or (d,), got a scalar.")
        weights = {}
        for w, shape in self.weight_shapes.items():
            p = getattr(self, w)  # a parametrization (torch.nn.utils.parametrize) computes it here
            if p is None or p.shape != shape:  # e.g. assigned after construction
                got = None if p is None else tuple(p.shape)
                raise ValueError(f"TorchLayer: weight {w!r} has shape {got}, expected {shape}.")
            weights[w] = p
        batch = inputs.shape[:-1]
        flat = inputs if inputs.ndim == 2 else inputs.reshape(math.prod(batch), inputs.shape[-1])
        out = self._fn(flat, weights)
        if not isinstance(out, torch.Tensor):
            raise TypeError("TorchLayer: circuit_fn must return one array (use to_torch for pytrees).")
        return out if inputs.ndim == 2 else out.reshape((*batch, *out.shape[1:]))

    def extra_repr(self) -> str:
        shapes = ", ".join(f"{k}={v}" for k, v in self.weight_shapes.items())
        diff = "" if self.diff is None else f", diff={self.diff!r}"
        return f"circuit_fn={_fn_name(self.circuit_fn)}, weight_shapes({shapes}){diff}"


# --- straight-through argmax --------------------------------------------------------------------------


class _StraightThroughArgMax(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, dim):
        n = x.shape[dim]
        return torch.nn.functional.one_hot(x.argmax(dim), n).to(x.dtype).movedim(-1, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (hard,) = ctx.saved_tensors
        return grad * hard.detach(), None  # the choice is a constant: higher derivatives are zero

    @staticmethod
    def jvp(ctx, tangent, _):
        (hard,) = ctx.saved_tensors
        return tangent * hard.detach()


def straight_through_argmax(x, dim: int = -1):
    """The one-hot of the largest entry along `dim`, with a straight-through gradient.

    Forward: `one_hot(argmax(x, dim))`, in `x`'s dtype. Backward: the gradient of the chosen entry passes
    through unchanged and every other entry gets zero (the derivative of `x * one_hot`, holding the
    choice fixed). Takes a torch tensor (a native torch op: `torch.func` and higher orders work) or a JAX
    array (then it is `qfx.straight_through_argmax`).
    """
    if isinstance(x, torch.Tensor):
        if not (x.is_floating_point()):
            raise TypeError(f"straight_through_argmax: x must be a floating tensor, got dtype {x.dtype}.")
        if x.ndim == 0:
            raise ValueError("straight_through_argmax: x must have at least one dimension, got a scalar.")
        if not -x.ndim <= dim < x.ndim:
            raise ValueError(
                f"straight_through_argmax: dim={dim} is out of range for shape {tuple(x.shape)}."
            )
        return _StraightThroughArgMax.apply(x, dim)
    return _jax_straight_through_argmax(x, axis=dim)


class ArgMax(torch.nn.Module):
    """`straight_through_argmax` as a module, for the end of a `torch.nn.Sequential` classifier."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return straight_through_argmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
