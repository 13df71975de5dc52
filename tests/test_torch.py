"""The Torch bridge, `qfx.torch`: conversions, autograd to any order, torch.func, TorchLayer, argmax."""

import copy
import gc
import io
import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import qfx

from .helpers import tree_allclose

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as fwad  # noqa: E402 - needs torch, so after the importorskip
from torch.testing._internal.two_tensor import TwoTensor  # noqa: E402 - a wrapper subclass

import qfx.torch as qt  # noqa: E402
from qfx.torch._bridge import _PACK_MAX_BYTES, Bridge, _cpu_argument, _cuda_paths, _fast_paths  # noqa: E402

DIFF_METHODS = [qfx.diff.Backprop(), qfx.diff.Adjoint(), qfx.diff.ParameterShift(), qfx.diff.FiniteDiff()]

cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or not any(d.platform == "gpu" for d in jax.devices()),
    reason="needs CUDA for both torch and JAX",
)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    # torch's OpenMP workers busy-wait after each parallel region and starve XLA's CPU threads (hybrid
    # training steps ran ~30x slower on 2 busy cores); these tests' torch ops are too small to need them.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def circuit(theta, x):
    """A small circuit: theta (3,), x (2,) -> [<Z0 Z1>, <X1>]. Inputs enter as angles, as in a QNN."""
    circ = qfx.Circuit(
        [
            qfx.RY(x[0], wires=0),
            qfx.RX(theta[0], wires=0),
            qfx.RY(theta[1], wires=1),
            qfx.CNOT((0, 1)),
            qfx.RX(theta[2] * x[1], wires=1),
        ]
    )
    return qfx.expval(circ, [qfx.Z(0) @ qfx.Z(1), qfx.X(1)])


def scalar(theta, x):
    out = circuit(theta, x)
    return out[0] + 0.5 * out[1] ** 2


# Shared wrappers, so that tests reuse their compilations (once per shape, dtype and x64 mode).
F_CIRCUIT = qt.to_torch(circuit)
F_SCALAR = qt.to_torch(scalar)
# References, jitted (eager JAX would compile every primitive of the circuit separately).
circuit_jac = jax.jit(jax.jacrev(circuit, argnums=(0, 1)))
scalar_grad = jax.jit(jax.grad(scalar))
scalar_hessian = jax.jit(jax.hessian(scalar))


def _np(t):
    return t.detach().cpu().numpy()


def _j(*tensors):
    return tuple(jnp.asarray(_np(t)) for t in tensors)


def _inputs(dtype=torch.float32, requires_grad=True):
    theta = torch.tensor([0.3, -0.8, 1.1], dtype=dtype, requires_grad=requires_grad)
    x = torch.tensor([0.7, 0.4], dtype=dtype, requires_grad=requires_grad)
    return theta, x


# --- packaging ------------------------------------------------------------------------------------


def test_import_qfx_does_not_import_torch():
    code = "import sys, qfx; assert 'torch' not in sys.modules, 'import qfx imported torch'; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --- tensors across ---------------------------------------------------------------------------------


def test_star_import_gives_the_public_names_only():
    # qfx.torch's module namespace holds its own imports (jax, np, sys, Any): __all__ keeps them out.
    namespace: dict = {}
    exec("from qfx.torch import *", namespace)  # noqa: S102
    public = sorted(k for k in namespace if k != "__builtins__")
    assert public == ["ArgMax", "TorchLayer", "from_jax", "straight_through_argmax", "to_jax", "to_torch"]
    assert all(callable(getattr(qt, name)) for name in qt.__all__)


def test_to_jax_and_from_jax_are_zero_copy():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = qt.to_jax(t)
    assert a.unsafe_buffer_pointer() == t.data_ptr()
    np.testing.assert_array_equal(np.asarray(a), t.numpy())
    b = jax.device_put(jnp.arange(6, dtype=jnp.float32) * 2, jax.devices("cpu")[0])  # CPU on GPU machines too
    u = qt.from_jax(b)
    assert u.data_ptr() == b.unsafe_buffer_pointer()
    np.testing.assert_array_equal(u.numpy(), np.asarray(b))
    # A tensor that requires grad is detached, still without a copy.
    p = torch.ones(5, requires_grad=True)
    assert qt.to_jax(p).unsafe_buffer_pointer() == p.data_ptr()


def test_to_jax_copies_exactly_when_documented():
    base = torch.arange(40, dtype=torch.float32)
    misaligned = base[1:17]  # starts 4 bytes into a buffer: JAX needs 64-byte alignment, so it copies
    a = qt.to_jax(misaligned)
    assert a.unsafe_buffer_pointer() != misaligned.data_ptr()
    np.testing.assert_array_equal(np.asarray(a), misaligned.numpy())
    strided = base.reshape(8, 5)[:, ::2]  # JAX refuses strided buffers: the bridge makes it contiguous
    np.testing.assert_array_equal(np.asarray(qt.to_jax(strided)), strided.numpy())
    transposed = base.reshape(8, 5).T
    np.testing.assert_array_equal(np.asarray(qt.to_jax(transposed)), transposed.numpy())
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    # torch's lazy conjugate (and negative) bits would be lost by raw DLPack: they are resolved first.
    np.testing.assert_array_equal(np.asarray(qt.to_jax(z.conj())), np.conj(z.numpy()))
    np.testing.assert_array_equal(np.asarray(qt.to_jax(torch.ones(3)._neg_view())), -np.ones(3))


def test_outputs_never_alias_inputs():
    f = qt.to_torch(lambda a, b: (a, b * 2, a))
    a, b = torch.ones(4), torch.ones(4)
    out_a, out_b, out_a2 = f(a, b)
    assert len({a.data_ptr(), out_a.data_ptr(), out_a2.data_ptr()}) == 3
    out_a.add_(1.0)
    np.testing.assert_array_equal(a.numpy(), np.ones(4))
    np.testing.assert_array_equal(out_a2.numpy(), np.ones(4))


_PLACEMENT_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, torch
cpu0, cpu1 = jax.devices("cpu")
jax.config.update("jax_default_device", cpu1)  # stands in for a GPU that JAX prefers
from qfx.torch import _bridge as bridge
import qfx.torch as qt
seen = []  # the devices of every array the bridge hands to torch
real, (to_jax, to_torch) = bridge.jax_to_tensor, bridge._fast_paths()
bridge.jax_to_tensor = lambda a: seen.append(a.devices()) or real(a)
bridge._fast_paths = lambda: (to_jax, lambda a: seen.append(a.devices()) or to_torch(a))
f = qt.to_torch(lambda a, b: (jnp.sin(a) * b, jnp.zeros(2)))
a, b = torch.rand(3, requires_grad=True), torch.rand(3)  # small: enter the jitted call as NumPy views
out, _ = f(a, b)
out.sum().backward()
assert a.grad.shape == (3,), a.grad
closed_over = jnp.arange(3.0)  # made before the call, on the default device
g = qt.to_torch(lambda a: (a * 2, closed_over, np.ones(2)), jit=False)  # untraced: returns them as they are
assert [t.device.type for t in g(torch.rand(3))] == ["cpu"] * 3, seen
assert seen and all(d == {cpu0} for d in seen), seen
print("ok")
"""


def test_cpu_tensors_run_on_the_cpu_device_whatever_jaxs_default():
    # On a GPU machine JAX's default device is the GPU; CPU tensors (which DLPack imports to the CPU device)
    # must still run there and come back as CPU tensors. Two CPU devices, the default set to the second,
    # stand in for that here.
    env = dict(
        os.environ,
        XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
    )
    proc = subprocess.run(
        [sys.executable, "-c", _PLACEMENT_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_in_place_write_between_forward_and_backward_is_caught():
    theta, x = _inputs()
    out = qt.to_torch(scalar)(theta, x)
    with torch.no_grad():
        theta.add_(1.0)  # what optimizer.step() does
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


# --- to_torch: values and gradients -----------------------------------------------------------------


def test_forward_matches_jax_and_keeps_pytrees():
    def fn(params, x):
        out = circuit(params["theta"], x)
        return {"expvals": out, "sum": (out.sum(),)}

    f = qt.to_torch(fn)
    theta, x = _inputs()
    out = f({"theta": theta}, x)
    expected = jax.jit(fn)({"theta": jnp.asarray(_np(theta))}, jnp.asarray(_np(x)))
    assert set(out) == {"expvals", "sum"} and isinstance(out["sum"], tuple)
    assert _np(out["expvals"]).dtype == expected["expvals"].dtype and out["expvals"].requires_grad
    assert tree_allclose(jax.tree.map(_np, out), expected)


def test_gradcheck_and_gradgradcheck_float64(x64):
    theta, x = _inputs(torch.float64)
    assert torch.autograd.gradcheck(F_CIRCUIT, (theta, x))
    assert torch.autograd.gradgradcheck(F_CIRCUIT, (theta, x))
    # The first derivatives equal JAX's.
    jac = torch.autograd.functional.jacobian(F_CIRCUIT, (theta, x))
    assert tree_allclose(tuple(map(_np, jac)), circuit_jac(*_j(theta, x)), rtol=1e-10, atol=1e-12)


def test_hessian_by_double_backward_matches_jax(x64):
    theta, x = _inputs(torch.float64)
    out = F_SCALAR(theta, x)
    (g,) = torch.autograd.grad(out, theta, create_graph=True)
    rows = [torch.autograd.grad(g[i], theta, retain_graph=True)[0] for i in range(3)]
    hessian = torch.stack(rows)
    assert tree_allclose(_np(hessian), scalar_hessian(*_j(theta, x)), rtol=1e-10, atol=1e-12)
    assert tree_allclose(_np(g), scalar_grad(*_j(theta, x)), rtol=1e-10, atol=1e-12)


def test_complex_gradients_follow_torch_convention(x64):
    def fn(z, w):
        return jnp.stack([z * jnp.conj(z) * w, jnp.sin(z) + w * jnp.conj(w)]).ravel()

    z = torch.tensor([0.3 + 0.4j, -1.0 + 0.2j], dtype=torch.complex128, requires_grad=True)
    w = torch.tensor([0.5, 1.5], dtype=torch.complex128, requires_grad=True)
    f = qt.to_torch(fn)
    assert torch.autograd.gradcheck(f, (z, w))
    assert torch.autograd.gradgradcheck(f, (z, w))
    # |z|^2 = x^2 + y^2: torch returns dL/dx + i dL/dy = 2z (z - lr * grad descends); JAX the conjugate.
    norm = qt.to_torch(lambda z: jnp.sum(jnp.abs(z) ** 2))
    norm(z).backward()
    np.testing.assert_allclose(_np(z.grad), 2 * _np(z))
    np.testing.assert_allclose(_np(z.grad), np.conj(jax.grad(lambda z: jnp.sum(jnp.abs(z) ** 2))(_np(z))))


def test_integer_outputs_are_not_differentiable():
    f = qt.to_torch(lambda x: (jnp.sin(x), jnp.argmax(x)))
    x = torch.tensor([0.1, 0.9, 0.3], requires_grad=True)
    y, i = f(x)
    assert not i.requires_grad and i.item() == 1
    y.sum().backward()
    np.testing.assert_allclose(_np(x.grad), np.cos(_np(x)), rtol=1e-6)


def test_compiles_once_per_shape_and_dtype():
    traces = []

    def fn(theta, x):
        traces.append(x.shape)
        return circuit(theta, x)

    f = qt.to_torch(fn)
    theta, x = _inputs(requires_grad=False)
    f(theta, x)
    f(theta + 1.0, x * 2.0)  # new values: no new trace
    assert traces == [(2,)]
    f(theta, torch.ones(3))  # a new shape traces again (and circuit ignores x[2])
    assert traces == [(2,), (3,)]


def test_direct_apply_matches_torch_function_apply():
    # Outside torch.func, the bridge calls torch's C++ `apply` itself (skipping ~15 us of Python).
    bridge = Bridge(lambda x, y: (jnp.sin(x) * y,), jit=True)
    x, y = torch.tensor([0.1, 0.5], requires_grad=True), torch.tensor([2.0, 3.0])
    (direct,) = bridge.apply(x, y)
    (public,) = bridge.function.apply(x, y)
    torch.testing.assert_close(direct, public)
    assert type(direct.grad_fn) is type(public.grad_fn)
    (g_direct,) = torch.autograd.grad(direct.sum(), x)
    (g_public,) = torch.autograd.grad(public.sum(), x)
    torch.testing.assert_close(g_direct, g_public)
    torch.testing.assert_close(g_direct, torch.cos(x.detach()) * y)


# torch's make_dual loads its JVP decompositions through the deprecated torch.jit.script on first use.
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_calls_without_a_graph_skip_the_autograd_node_but_keep_forward_ad():
    # No input requires grad (or grad mode is off): the forward runs without an autograd node.
    theta, x = _inputs(requires_grad=False)
    out = F_CIRCUIT(theta, x)
    assert out.grad_fn is None and not out.requires_grad
    (jac_theta, _) = circuit_jac(*_j(theta, x))
    np.testing.assert_allclose(_np(out), np.asarray(circuit(*_j(theta, x))), rtol=1e-6)
    # Dual tensors (torch.autograd.forward_ad) do not require grad either; they still get the JVP.
    tangent = torch.tensor([0.5, -1.0, 2.0])
    with fwad.dual_level():
        dual_out = F_CIRCUIT(fwad.make_dual(theta, tangent), x)
        out_tangent = fwad.unpack_dual(dual_out).tangent
    assert out_tangent is not None
    np.testing.assert_allclose(_np(out_tangent), np.asarray(jac_theta) @ _np(tangent), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # see above
@pytest.mark.parametrize("outputs", ["scalar", "vector"])
def test_forward_over_reverse_without_create_graph(outputs, x64):
    """A first-order backward inside a forward-AD dual level: the gradient's tangent is a Hessian-vector
    product, which the residuals kept by the forward cannot give (they know nothing of tangents)."""
    fj = (lambda x: jnp.sum(jnp.sin(x) * x)) if outputs == "scalar" else (lambda x: jnp.sin(x) * x)
    f = qt.to_torch(fj)
    x0 = np.array([0.3, 0.8, -1.1])
    v = np.array([1.0, 0.0, 0.5])
    x = torch.tensor(x0, requires_grad=True)
    with fwad.dual_level():
        y = f(fwad.make_dual(x, torch.tensor(v)))
        (g,) = torch.autograd.grad((y * y).sum(), x)
        tangent = fwad.unpack_dual(g).tangent
    loss = lambda x: jnp.sum(fj(x) ** 2)  # noqa: E731
    expected = jax.jvp(jax.grad(loss), (jnp.asarray(x0),), (jnp.asarray(v),))[1]
    assert tangent is not None
    np.testing.assert_allclose(_np(tangent), np.asarray(expected), rtol=1e-12)


def test_layers_made_and_dropped_leave_no_compilations_behind():
    """Each new TorchLayer compiles its own calls; once it is dropped they must go with it (a module-level
    jitted function once kept every layer's backward, ~1.5 MiB a layer, for the life of the process)."""

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def use_one_layer():
        layer = qt.TorchLayer(lambda x, w: jnp.tanh(x @ w), {"w": (16, 16)})
        layer(torch.randn(4, 16)).sum().backward()

    for _ in range(10):  # warm-up: what every layer shares is compiled and allocated
        use_one_layer()
    gc.collect()
    before = rss_mib()
    for _ in range(60):
        use_one_layer()
    gc.collect()
    assert rss_mib() - before < 30  # 90 MiB and more when every layer's compilations were kept


@pytest.mark.parametrize("size", [4, 100_000])  # below and above the bridge's copy threshold (64 KiB)
def test_small_inputs_are_copied_large_ones_shared_and_both_are_exact(size):
    f = qt.to_torch(lambda a, b: (jnp.sin(a) * b, a))
    a = torch.linspace(-3.0, 3.0, size, requires_grad=True)
    b = torch.rand(size)
    # The route each input takes into a jitted call: a NumPy view (copied by the call) or a zero-copy
    # JAX array on the tensor's own buffer.
    to_jax, _ = _fast_paths()
    arg = _cpu_argument(b, to_jax)
    if size * 4 <= 64 * 1024:  # the documented threshold
        assert isinstance(arg, np.ndarray) and arg.ctypes.data == b.data_ptr()
    else:
        assert isinstance(arg, jax.Array) and arg.unsafe_buffer_pointer() == b.data_ptr()
    out, same = f(a, b)
    torch.testing.assert_close(out, torch.sin(a.detach()) * b)
    (g,) = torch.autograd.grad(out.sum(), a, retain_graph=True)
    torch.testing.assert_close(g, torch.cos(a.detach()) * b)
    # Either way, an output never shares memory with an input, and later writes to the input leave the
    # outputs alone.
    assert same.data_ptr() != a.data_ptr()
    with torch.no_grad():
        a.add_(1.0)
    torch.testing.assert_close(same, torch.linspace(-3.0, 3.0, size))


@pytest.mark.parametrize("loss_in", ["torch", "jax"])
def test_backward_reuses_the_forward_unless_create_graph(loss_in):
    """A first-order backward applies what the forward kept (JAX's VJP residuals, or for a scalar output
    the gradients themselves) instead of running the circuit again; create_graph=True re-runs it."""
    runs = []

    def counted(theta, x):
        jax.debug.callback(lambda: runs.append(1))  # once per execution of the forward computation
        out = circuit(theta, x)
        return scalar(theta, x) if loss_in == "jax" else out

    f = qt.to_torch(counted)

    def loss(theta, x):
        out = f(theta, x)
        return out if loss_in == "jax" else out[0] + 0.5 * out[1] ** 2

    theta, x = _inputs()
    loss(theta, x).backward()
    assert runs == [1]  # the backward did not re-run the circuit
    expected = jax.jit(jax.grad(scalar, argnums=(0, 1)))(*_j(theta, x))
    assert tree_allclose((_np(theta.grad), _np(x.grad)), expected, rtol=1e-5, atol=1e-6)
    # retain_graph: the kept values serve a second backward, which accumulates the same gradients.
    theta.grad = x.grad = None
    out = loss(theta, x)
    out.backward(retain_graph=True)
    out.backward()
    assert tree_allclose((_np(theta.grad), _np(x.grad)), jax.tree.map(lambda g: 2 * g, expected), rtol=1e-5)
    assert len(runs) == 2
    # Only theta requires grad: the kept pullback is for theta alone.
    (g,) = torch.autograd.grad(loss(theta, x.detach()), theta)
    assert tree_allclose(_np(g), expected[0], rtol=1e-5, atol=1e-6) and len(runs) == 3
    # create_graph=True: the backward is the VJP bridge, which runs the circuit again.
    (g,) = torch.autograd.grad(loss(theta, x), theta, create_graph=True)
    assert g.requires_grad and len(runs) == 5
    assert tree_allclose(_np(g), expected[0], rtol=1e-5, atol=1e-6)
    # Under no_grad nothing is kept (one plain call).
    with torch.no_grad():
        loss(theta, x)
    assert len(runs) == 6


def test_kept_residuals_large_and_small():
    """At batch 512 the forward keeps residuals of ~64 KiB each (they cross as they are) beside small ones
    (packed per dtype) and integer ones; the backward from them matches JAX's VJP, for real and complex
    outputs (the complex cotangent enters in torch's convention, the conjugate of JAX's)."""

    def many(theta, xs):
        out = jax.vmap(circuit, in_axes=(None, 0))(theta, xs)
        a, s = out[:, 0], jnp.sum(theta)
        return out, jax.lax.complex(s * jnp.cos(a), s * jnp.sin(a))  # s exp(i a)

    f = qt.to_torch(many)
    rng = np.random.default_rng(3)
    theta = torch.tensor([0.3, -0.8, 1.1], requires_grad=True)
    xs = torch.tensor(rng.uniform(-1, 1, (512, 2)).astype(np.float32), requires_grad=True)
    out, z = f(theta, xs)
    w = torch.tensor(rng.normal(size=(512, 2)).astype(np.float32))
    u = torch.tensor(rng.normal(size=512) + 1j * rng.normal(size=512), dtype=torch.complex64)
    (out * w).sum().add((z * u.conj()).real.sum()).backward()

    entry = next(iter(f._entries.values()))
    kept = entry.bridge.keeping((True, True))(*_j(theta, xs))[1]
    whole = [kept.arrays[where] for where, offset, _ in kept.how[2] if where is not None and offset is None]
    assert whole and all(a.size * a.dtype.itemsize >= _PACK_MAX_BYTES for a in whole)
    assert any(offset is not None for _, offset, _ in kept.how[2])  # and packed ones

    _, pullback = jax.vjp(many, *_j(theta, xs))
    # Torch's cotangent of z for the loss Re(sum(z * conj(u))) is u; JAX's is its conjugate.
    expected = pullback((jnp.asarray(_np(w)), jnp.conj(jnp.asarray(_np(u)))))
    assert tree_allclose((_np(theta.grad), _np(xs.grad)), expected, rtol=1e-4, atol=1e-5)


def test_custom_vjp_backward_gets_the_real_cotangent():
    """The backward of a scalar loss scales the gradients its forward computed for a unit cotangent only
    when the VJP is JAX's own, linear in the cotangent. A `jax.custom_vjp` may not be (JAX's gradient
    clipping example: the cotangent clipped to [-1, 1]): its backward gets torch's real cotangent, 5 here,
    as `jax.vjp` does; a loss without one keeps the fused path."""

    @jax.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))

    def clipped(x):
        return clip_gradient(jnp.sum(jnp.sin(x)))

    def plain(x):
        return jnp.sum(jnp.sin(x))

    x0 = np.array([0.1, 0.2, 0.3], np.float32)
    for fn, fused in ((clipped, False), (plain, True)):
        f = qt.to_torch(fn)
        x = torch.tensor(x0, requires_grad=True)
        (5.0 * f(x)).backward()
        (expected,) = jax.vjp(fn, jnp.asarray(x0))[1](jnp.float32(5.0))
        np.testing.assert_allclose(_np(x.grad), np.asarray(expected), rtol=1e-6)
        kept = next(iter(f._entries.values())).bridge.keeping((True,))(jnp.asarray(x0))[1]
        assert (kept.how[0] == "grads") == fused
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: 5.0 * clipped(x))(x0)), np.cos(x0), rtol=1e-6)


def test_jit_false_runs_untraced():
    f = qt.to_torch(lambda x: jnp.asarray(np.sin(np.asarray(x))), jit=False)
    x = torch.tensor([0.1, 0.2])
    np.testing.assert_allclose(_np(f(x)), np.sin(_np(x)), rtol=1e-6)


def test_jit_false_outputs_are_fresh():
    """An untraced function may return an array it closes over: its output is a copy, so writing it in
    place changes neither that JAX array nor later outputs."""
    w = jnp.arange(3.0)
    f = qt.to_torch(lambda x: (2 * x, w), jit=False)
    x = torch.ones(3)
    _, out = f(x)
    with torch.no_grad():
        out.add_(100.0)
    np.testing.assert_array_equal(np.asarray(w), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(_np(f(x)[1]), [0.0, 1.0, 2.0])


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_one_entry_outputs_of_any_shape(shape):
    """A loss of one entry, whatever its shape, takes the fused value-and-grad path."""
    f = qt.to_torch(lambda x: jnp.sum(x**2).reshape(shape))
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = f(x)
    assert y.shape == shape
    (3.0 * y.sum()).backward()
    torch.testing.assert_close(x.grad, torch.tensor([6.0, 12.0]))


def test_half_precision_losses_are_scaled_before_the_pullback():
    """Mixed-precision training scales a half-precision loss by a large factor so that small gradients do
    not underflow (or divides it, for large ones): the bridge must apply the real cotangent in the pullback,
    as torch and JAX do, not scale a gradient computed for a unit cotangent."""
    fj = lambda x, y: jnp.sum(x * y * y)  # noqa: E731
    f = qt.to_torch(fj)
    tdt = torch.float16  # (bfloat16 has float32's range: the unit-cotangent gradient fits there)
    for yy, scale in [(1e-4, 16384.0), (300.0, 1 / 64)]:  # y*y underflows / overflows in float16
        x = torch.ones(3, dtype=tdt, requires_grad=True)
        y = torch.full((3,), yy, dtype=tdt)
        f(x, y).backward(torch.tensor(scale, dtype=tdt))
        bridged = x.grad.clone()
        x.grad = None
        (x * y * y).sum().backward(torch.tensor(scale, dtype=tdt))
        assert torch.isfinite(bridged).all() and (bridged != 0).all()
        torch.testing.assert_close(bridged, x.grad, rtol=2e-2, atol=0)


def test_float32_losses_of_half_precision_inputs_are_scaled_before_the_pullback():
    """A float32 loss computed in JAX from float16 activations: the gradient of a unit cotangent, rounded to
    float16, loses what the loss scale should save (or overflows once torch multiplies it by the scale in
    float16); the real cotangent must enter the pullback, as for a vector output."""
    for factor, scale in [(1e-9, 65536.0), (1e5, 0.01)]:  # 1e-9 underflows in float16, 65536 * 1e5 overflows
        f = qt.to_torch(lambda x, factor=factor: jnp.sum(x.astype(jnp.float32) * factor))
        x = torch.ones(4, dtype=torch.float16, requires_grad=True)
        (f(x) * scale).backward()
        bridged = x.grad.clone()
        x.grad = None
        ((x.float() * factor).sum() * scale).backward()
        assert torch.isfinite(bridged).all() and (bridged != 0).all()
        torch.testing.assert_close(bridged, x.grad, rtol=2e-3, atol=0)


def _live_jax_bytes() -> int:
    """Bytes of the live JAX arrays on the CPU, where calls on CPU tensors run (also on a GPU machine)."""
    gc.collect()
    return sum(a.nbytes for a in jax.live_arrays("cpu"))


def test_kept_residuals_are_freed_by_the_backward():
    """Torch frees what a node saved once its backward ran (unless retain_graph=True); so does the bridge
    with the VJP residuals it kept, even while the outputs stay alive (e.g. kept for logging)."""
    f = qt.to_torch(lambda x: jnp.sin(x) * jnp.exp(x))  # residuals: cos(x), sin(x), exp(x) or the like
    x = torch.randn(100_000, requires_grad=True)  # 400 kB each
    nbytes = x.numel() * x.element_size()
    before = _live_jax_bytes()
    y = f(x)
    assert _live_jax_bytes() - before >= 3 * nbytes  # y's buffer and at least two residuals
    y.sum().backward(retain_graph=True)
    assert _live_jax_bytes() - before >= 4 * nbytes  # the same and x.grad: retained for another backward
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * (torch.cos(x) + torch.sin(x)) * torch.exp(x).detach())
    assert _live_jax_bytes() - before == 2 * nbytes  # y and x.grad are alive; the residuals are gone


def test_outputs_torch_does_not_differentiate_get_zero_cotangents():
    """A float8 output (JAX differentiates it, torch does not) beside a float32 one."""
    f = qt.to_torch(lambda x: (jnp.sin(x), x.astype(jnp.float8_e4m3fn)))
    x = torch.tensor([0.1, 0.5, 1.0], requires_grad=True)
    y, z = f(x)
    assert z.dtype == torch.float8_e4m3fn and not z.requires_grad
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    torch.testing.assert_close(g, torch.cos(x.detach()))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))


# TorchDynamo reads `.grad` of the intermediate tensor it passes on after the graph break, which warns.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.(script|trace)` is deprecated:DeprecationWarning")
def test_tracing_torch_compile_and_legacy_vmap():
    """torch.compile runs the call outside its graph (a graph break); tracers that would record the JAX
    call as a constant, and torch's legacy vmap, raise clear errors."""
    f = qt.to_torch(lambda x: jnp.sin(x) * x)
    x = torch.tensor([0.3, -0.7, 1.2], requires_grad=True)

    def model(x):
        return (f(2 * x) + 1).sum()

    compiled = torch.compile(model, backend="eager")
    (g,) = torch.autograd.grad(compiled(x), x)
    (expected,) = torch.autograd.grad(model(x), x)
    torch.testing.assert_close(g, expected)
    with pytest.raises(RuntimeError, match=r"to_torch\(<lambda>\): torch.jit.trace and make_fx"):
        torch.func.linearize(f, x.detach())
    with pytest.raises(RuntimeError, match="torch.jit.trace"):
        torch.jit.trace(f, (x.detach(),))
    y = f(x)
    with pytest.raises(TypeError, match=r"legacy vmap.*torch.func"):
        torch.autograd.grad(y, x, torch.eye(3), is_grads_batched=True)
    with pytest.raises(TypeError, match=r"legacy vmap.*torch.func"):  # its forward mode
        torch.autograd.functional.jacobian(f, x.detach(), vectorize=True, strategy="forward-mode")


# TorchDynamo reads .grad of the transforms' intermediate tensors as it resumes after the graph break.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
# torch warns from inside its own code the first time forward-mode AD loads its decompositions (jacfwd).
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torch_compile_of_torch_func_transforms():
    """Under torch.compile, a torch.func transform of a bridged call runs the call eagerly: TorchDynamo must
    not trace into the bridge's autograd.Function (it once did, and fed JAX's tracers to its own frames)."""
    f = qt.to_torch(lambda x, w: jnp.sin(x) * w)
    x, w = torch.tensor([0.3, -0.7, 1.2]), torch.tensor([1.5, 0.2, -0.4])
    transforms = {
        "grad": lambda: torch.func.grad(lambda x, w: f(x, w).sum(), argnums=1),
        "jacrev": lambda: torch.func.jacrev(f, argnums=1),
        "vjp": lambda: lambda x, w: torch.func.vjp(lambda w: f(x, w), w)[1](torch.ones(3))[0],
        "jacfwd": lambda: torch.func.jacfwd(f, argnums=1),
        "vmap": lambda: torch.func.vmap(f, in_dims=(0, None)),
        # jacfwd of jacrev: the vjp inside another transform is right with every torch.
        "hessian": lambda: torch.func.hessian(lambda x, w: (f(x, w) * w).sum(), argnums=1),
    }
    for name, make in transforms.items():
        torch._dynamo.reset()
        args = (torch.stack([x, 2 * x]), w) if name == "vmap" else (x, w)
        compiled = torch.compile(make(), backend="aot_eager")
        if name in ("jacrev", "vjp") and qt._COMPILED_VJP_LOSES_GRADIENTS:
            # torch < 2.12 returns zeros here (pytorch/pytorch#172386): the bridge refuses instead.
            with pytest.raises(RuntimeError, match="pytorch/pytorch#172386"):
                compiled(*args)
            eager_transform = torch.compiler.disable(make())  # the way around it the message gives
            torch.testing.assert_close(
                torch.compile(lambda *a, t=eager_transform: t(*a), backend="aot_eager")(*args), make()(*args)
            )
            continue
        expected = make()(*args)
        assert expected.abs().sum() > 0, name  # a lost gradient (zeros) would not pass unseen
        torch.testing.assert_close(compiled(*args), expected, msg=lambda m, name=name: f"{name}: {m}")


def test_compiled_vjp_check_passes_other_calls(monkeypatch):
    """The torch < 2.12 refusal (`_refuse_compiled_vjp`) runs on every call: switched on whatever this torch
    is, plain calls and eager transforms go through and only the compiled vjp is refused. (Its first
    version crashed on every call outside a transform, where torch reports no interpreter stack at all;
    CI runs a torch without the check, so this is where it runs.)"""
    monkeypatch.setattr(qt, "_COMPILED_VJP_LOSES_GRADIENTS", True)
    f = qt.to_torch(lambda x: jnp.sin(x))
    x = torch.tensor([0.3, -0.7, 1.2])
    torch.testing.assert_close(f(x), torch.sin(x))
    torch.testing.assert_close(torch.func.grad(lambda x: f(x).sum())(x), torch.cos(x))
    torch.testing.assert_close(torch.func.jacrev(f)(x), torch.diag(torch.cos(x)))
    layer = qt.TorchLayer(lambda x, w: jnp.sin(x) * w, {"w": (3,)})
    layer(x).sum().backward()
    torch.testing.assert_close(layer.w.grad, torch.sin(x))
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="pytorch/pytorch#172386"):
        torch.compile(torch.func.jacrev(f), backend="aot_eager")(x)


# --- torch.func -------------------------------------------------------------------------------------


def _is_batched(x) -> bool:
    """True inside `jax.vmap` (x is then a batching tracer)."""
    return type(x).__name__ == "BatchTracer"


def _record_batching(fn, seen):
    def wrapped(theta, x):
        seen.append(_is_batched(x))
        return fn(theta, x)

    return wrapped


def test_func_vmap_is_one_jax_vmap_call():
    seen = []
    f = qt.to_torch(_record_batching(circuit, seen))  # its own wrapper: to see its one trace
    theta, _ = _inputs(requires_grad=False)
    xs = torch.rand(5, 2)
    out = torch.func.vmap(f, in_dims=(None, 0))(theta, xs)
    expected = jax.jit(jax.vmap(circuit, in_axes=(None, 0)))(*_j(theta, xs))
    assert tree_allclose(_np(out), expected)
    assert seen == [True]  # traced once, under jax.vmap: the vmap rule ran, no loop over the batch
    # vmap over a dimension other than 0, and nested vmap.
    out_t = torch.func.vmap(f, in_dims=(None, 1))(theta, xs.T.contiguous())
    assert tree_allclose(_np(out_t), expected)
    xs2 = torch.rand(3, 4, 2)
    nested = torch.func.vmap(torch.func.vmap(f, in_dims=(None, 0)), in_dims=(None, 0))(theta, xs2)
    assert nested.shape == (3, 4, 2)
    assert tree_allclose(_np(nested[1]), jax.jit(jax.vmap(circuit, in_axes=(None, 0)))(*_j(theta, xs2[1])))


# torch warns from inside its own code the first time forward-mode AD loads its decompositions.
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_func_grad_jacrev_jacfwd_hessian(x64):
    theta, x = _inputs(torch.float64, requires_grad=False)
    tol = dict(rtol=1e-10, atol=1e-12)
    assert tree_allclose(_np(torch.func.grad(F_SCALAR)(theta, x)), scalar_grad(*_j(theta, x)), **tol)
    jac = torch.func.jacrev(F_CIRCUIT, argnums=(0, 1))(theta, x)
    assert tree_allclose(tuple(map(_np, jac)), circuit_jac(*_j(theta, x)), **tol)
    jac_fwd = torch.func.jacfwd(F_CIRCUIT, argnums=(0, 1))(theta, x)
    assert tree_allclose(tuple(map(_np, jac_fwd)), circuit_jac(*_j(theta, x)), **tol)
    hess = torch.func.hessian(F_SCALAR)(theta, x)  # jacfwd(jacrev): forward mode over the VJP bridge
    assert tree_allclose(_np(hess), scalar_hessian(*_j(theta, x)), **tol)
    xs = torch.rand(4, 2, dtype=torch.float64)
    per_sample = torch.func.vmap(torch.func.grad(F_SCALAR), in_dims=(None, 0))(theta, xs)
    assert tree_allclose(_np(per_sample), jax.vmap(scalar_grad, in_axes=(None, 0))(*_j(theta, xs)), **tol)


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # forward AD
def test_adjoint_in_torch_forward_mode_says_what_works(x64):
    """torch.func.hessian is jacfwd of jacrev, which takes the forward mode of the function itself: the
    adjoint method has none. The error names the alternatives, and they agree with jax.hessian."""

    def energy(t):
        circ = qfx.Circuit([qfx.RX(t[0], wires=0), qfx.RY(t[1], wires=0), qfx.CNOT((0, 1))])
        return qfx.expval(circ, qfx.Z(1), diff=qfx.diff.Adjoint())

    f = qt.to_torch(energy)
    t = torch.tensor([0.3, 0.5], dtype=torch.float64)
    with pytest.raises(TypeError, match=r"torch.s forward mode .* torch.func.jacrev of torch.func"):
        torch.func.hessian(f)(t)
    expected = np.asarray(jax.hessian(energy)(jnp.asarray([0.3, 0.5])))
    np.testing.assert_allclose(_np(torch.func.jacrev(torch.func.jacrev(f))(t)), expected, rtol=1e-10)
    np.testing.assert_allclose(_np(torch.autograd.functional.hessian(f, t)), expected, rtol=1e-10)


def test_bad_arguments_raise_clear_errors():
    f = F_CIRCUIT
    theta, x = _inputs(requires_grad=False)
    with pytest.raises(TypeError, match=r"argument \[1\] has dtype torch.int64.*\.float\(\)"):
        f(theta, torch.tensor([1, 2]))
    with pytest.raises(
        TypeError, match=r"argument \[0\]\[0\] is a float, but the bridge takes torch.Tensors"
    ):
        f([0.3, 0.1, 0.2], x)
    with pytest.raises(TypeError, match=r"argument \[0\]\['theta'\] has dtype torch.bool"):
        qt.to_torch(lambda p: p["theta"])({"theta": torch.ones(2, dtype=torch.bool)})
    with pytest.raises(
        ValueError, match=r"argument \[1\] is on device meta, which JAX cannot see.*\.cpu\(\)"
    ):
        f(theta, torch.empty(2, device="meta"))
    with pytest.raises(TypeError, match="at least one torch.Tensor"):
        f()
    with pytest.raises(TypeError, match=r"pass the arguments positionally \(got keyword arguments x\)"):
        f(theta, x=x)
    with pytest.raises(TypeError, match="expected a callable"):
        qt.to_torch(3)
    with pytest.raises(TypeError, match="to_jax: the tensor has dtype torch.int32"):
        qt.to_jax(torch.ones(2, dtype=torch.int32))
    with pytest.raises(TypeError, match="from_jax: expected a jax.Array"):
        qt.from_jax(np.ones(2))
    with pytest.raises(TypeError, match=r"PRNG key array has no DLPack form; pass jax.random.key_data"):
        qt.from_jax(jax.random.key(0))
    with pytest.raises(TypeError, match="must return arrays"):
        qt.to_torch(lambda x: "no")(x)
    with pytest.raises(TypeError, match=r"returned a PRNG key array .* jax.random.key_data\(key\)"):
        qt.to_torch(lambda x: (x, jax.random.key(0)))(x)
    with pytest.raises(TypeError, match=r"argument \[1\] has layout torch.sparse_coo.*to_dense"):
        f(theta, torch.eye(2).to_sparse())


def test_float64_needs_x64():
    if jax.config.read("jax_enable_x64"):
        pytest.skip("x64 mode is on for the whole session")
    with pytest.raises(TypeError, match=r"argument \[0\] has dtype torch.float64.*jax_enable_x64"):
        F_CIRCUIT(torch.zeros(3, dtype=torch.float64), torch.zeros(2))


def test_x64_turned_off_before_the_backward():
    """A float64 forward whose backward runs after x64 mode was turned off: JAX would compute the VJP in
    float32 without a word (2.9e-8 errors in float64 gradients, or an internal error); it says so."""
    f = qt.to_torch(jnp.sin)
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        y = f(x)
        jax.config.update("jax_enable_x64", False)
        for create_graph in (True, False):  # the VJP bridge, and the residuals the forward kept
            with pytest.raises(TypeError, match=r"backward has 64-bit tensors.*x64 mode is off"):
                torch.autograd.grad(y.sum(), x, create_graph=create_graph, retain_graph=True)
    finally:
        jax.config.update("jax_enable_x64", previous)


@pytest.mark.filterwarnings("ignore:The PyTorch API of MaskedTensors is in prototype stage:UserWarning")
def test_wrapper_subclasses_are_refused():
    """Tensor subclasses with their own __torch_dispatch__ have no buffer for DLPack to export: a
    TwoTensor of more than 64 KiB crashed the interpreter, a MaskedTensor came out as garbage."""
    a = torch.arange(30000.0)
    double = qt.to_torch(lambda x: x * 2)
    for t in (TwoTensor(a, a.clone()), TwoTensor(a[:4], a[:4].clone()), torch.masked.masked_tensor(a, a > 5)):
        name = type(t).__name__
        with pytest.raises(TypeError, match=rf"argument \[0\] is a {name}, a tensor subclass"):
            double(t)
        with pytest.raises(TypeError, match=rf"to_jax: the tensor is a {name}, a tensor subclass"):
            qt.to_jax(t)
    # Subclasses without __torch_dispatch__ have a buffer and cross as before.
    torch.testing.assert_close(double(torch.nn.Parameter(a)), 2 * a)
    torch.testing.assert_close(double(a.as_subclass(_Tagged)), 2 * a)


class _Tagged(torch.Tensor):
    """A `__torch_function__`-only subclass."""


# --- TorchLayer -------------------------------------------------------------------------------------


BACKPROP = qfx.diff.Backprop()


def layer_circuit(inputs, theta, phi, diff=BACKPROP):
    """One sample: inputs (2,), theta (2, 2), phi () -> <Z0>, <Z1>, <Z0 Z1>."""
    ops = []
    for layer in theta:  # data re-uploading: the inputs enter every layer
        ops += [qfx.RY(inputs[0], wires=0), qfx.RY(inputs[1], wires=1)]
        ops += [qfx.RX(layer[0], wires=0), qfx.RX(layer[1], wires=1), qfx.CNOT((0, 1))]
    ops.append(qfx.RZ(phi, wires=1))
    return qfx.expval(qfx.Circuit(ops), [qfx.Z(0), qfx.Z(1), qfx.Z(0) @ qfx.Z(1)], diff=diff)


SHAPES = {"theta": (2, 2), "phi": ()}


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch >= 2.13
def test_torchscript_of_a_model_with_a_layer_names_the_layer():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), qt.TorchLayer(layer_circuit, SHAPES))
    with pytest.raises(RuntimeError, match=r"TorchLayer\(layer_circuit\): torch.jit.script cannot"):
        torch.jit.script(model)


def test_layer_runs_the_batch_as_one_vmapped_call():
    seen = []

    def recorded(inputs, theta, phi):
        seen.append(_is_batched(inputs))
        return layer_circuit(inputs, theta, phi)

    torch.manual_seed(0)
    layer = qt.TorchLayer(recorded, SHAPES)
    assert {n for n, _ in layer.named_parameters()} == {"theta", "phi"}
    assert isinstance(layer.theta, torch.nn.Parameter) and layer.theta.shape == (2, 2)
    xs = torch.rand(6, 2)
    out = layer(xs)
    assert out.shape == (6, 3)
    assert seen == [True]  # one trace, under jax.vmap: no Python loop over the 6 samples
    expected = jax.jit(jax.vmap(layer_circuit, in_axes=(0, None, None)))(*_j(xs, layer.theta, layer.phi))
    assert tree_allclose(_np(out), expected)
    # Leading batch dimensions are flattened into the one call; a single sample works too.
    assert tree_allclose(_np(layer(xs.reshape(2, 3, 2))), np.asarray(expected).reshape(2, 3, 3))
    assert seen == [True]
    assert tree_allclose(_np(layer(xs[4])), expected[4])
    assert seen == [True, True]  # batch size 1 is a new shape: traced once more, still vmapped


def test_layer_scalar_outputs_and_empty_inputs():
    """A circuit returning one value per sample, on a single sample (d,), a batch of one (1, d) and nested
    batches, with gradients; and inputs with d = 0 (a circuit of weights only) under batch dimensions."""

    def energy(inputs, theta, phi):
        return layer_circuit(inputs, theta, phi)[2]

    layer = qt.TorchLayer(energy, SHAPES)
    xs = torch.rand(2, 3, 2)
    full = layer(xs)
    assert full.shape == (2, 3)
    for x in (xs[1, 2], xs[1, 2:]):
        out = layer(x)
        assert out.shape == x.shape[:-1]
        torch.testing.assert_close(out.reshape(()), full[1, 2])
        (g,) = torch.autograd.grad(out.sum(), layer.theta)
        expected = jax.grad(energy, argnums=1)(*_j(xs[1, 2], layer.theta, layer.phi))
        assert tree_allclose(_np(g), expected, rtol=1e-5, atol=1e-6)

    def weights_only(inputs, theta, phi):
        return layer_circuit(jnp.zeros(2) + jnp.sum(inputs), theta, phi)

    bare = qt.TorchLayer(weights_only, SHAPES)
    out = bare(torch.zeros(2, 3, 0))
    assert out.shape == (2, 3, 3)
    torch.testing.assert_close(out[1, 2], bare(torch.zeros(0)))


@pytest.mark.parametrize("diff", DIFF_METHODS, ids=lambda d: type(d).__name__)
def test_layer_gradients_with_every_diff_method(diff, x64):
    init = {"theta": torch.tensor([[0.1, 0.2], [0.3, 0.4]])}
    layer = qt.TorchLayer(layer_circuit, SHAPES, diff=diff, init=init, dtype=torch.float64)
    xs = torch.rand(4, 2, dtype=torch.float64, requires_grad=True)
    layer(xs).pow(2).sum().backward()

    def loss(xs, theta, phi):
        out = jax.vmap(lambda x: layer_circuit(x, theta, phi, diff=diff))(xs)
        return jnp.sum(out**2)

    expected = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*_j(xs, layer.theta, layer.phi))
    grads = (_np(xs.grad), _np(layer.theta.grad), _np(layer.phi.grad))
    assert tree_allclose(grads, expected, rtol=1e-7, atol=1e-9)
    assert f"diff={diff!r}" in repr(layer)


def test_layer_state_dict_round_trip_and_copies():
    torch.manual_seed(1)
    layer = qt.TorchLayer(layer_circuit, SHAPES)
    xs = torch.rand(3, 2)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    other = qt.TorchLayer(layer_circuit, SHAPES, init=torch.nn.init.zeros_)
    assert not torch.allclose(other(xs), layer(xs))
    other.load_state_dict(torch.load(buffer, weights_only=True))
    torch.testing.assert_close(other(xs), layer(xs))
    torch.testing.assert_close(copy.deepcopy(layer)(xs), layer(xs))
    torch.testing.assert_close(pickle.loads(pickle.dumps(layer))(xs), layer(xs))


def test_layer_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"weight_shapes\['theta'\] must be an int or a tuple"):
        qt.TorchLayer(layer_circuit, {"theta": (2, -1), "phi": ()})
    with pytest.raises(
        ValueError, match=r"init\['theta'\] has shape \(3,\), but weight_shapes\['theta'\] is \(2, 2\)"
    ):
        qt.TorchLayer(layer_circuit, SHAPES, init={"theta": torch.zeros(3)})
    with pytest.raises(ValueError, match="init names \\['psi'\\]"):
        qt.TorchLayer(layer_circuit, SHAPES, init={"psi": torch.zeros(3)})
    with pytest.raises(ValueError, match="weight name 'forward' is reserved"):
        qt.TorchLayer(layer_circuit, {"forward": 2})
    with pytest.raises(TypeError, match="weight_shapes must be a non-empty dict"):
        qt.TorchLayer(layer_circuit, [(2, 2)])
    for name in ("circuit_fn", "weight_shapes", "training", "_fn"):  # the layer's own attributes
        with pytest.raises(ValueError, match=f"weight name '{name}' is reserved"):
            qt.TorchLayer(layer_circuit, {name: 2})
    with pytest.raises(TypeError, match="init for 'theta' must fill its tensor in place"):
        qt.TorchLayer(layer_circuit, SHAPES, init=lambda t: 0.5)
    with pytest.raises(TypeError, match="dtype must be a floating torch dtype .* got torch.int64"):
        qt.TorchLayer(layer_circuit, SHAPES, dtype=torch.int64)
    layer = qt.TorchLayer(layer_circuit, SHAPES)
    with pytest.raises(TypeError, match=r"TorchLayer\(layer_circuit\): inputs has dtype torch.int64"):
        layer(torch.ones(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="inputs must have shape .* got a scalar"):
        layer(torch.tensor(1.0))
    layer.theta = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=r"weight 'theta' has shape \(3,\), expected \(2, 2\)"):
        layer(torch.ones(3, 2))


def test_layer_init_values_and_functions_and_parametrizations():
    # A function may fill in place (torch.nn.init) or return a new tensor; given values (NumPy float64,
    # Python ints) take torch's default dtype unless dtype= says otherwise.
    fills = qt.TorchLayer(layer_circuit, SHAPES, init=torch.nn.init.ones_)
    returns = qt.TorchLayer(layer_circuit, SHAPES, init=lambda t: torch.ones_like(t))
    values = qt.TorchLayer(layer_circuit, SHAPES, init={"theta": np.ones((2, 2)), "phi": 1})
    for layer in (fills, returns, values):
        assert layer.theta.dtype == layer.phi.dtype == torch.get_default_dtype()
        torch.testing.assert_close(layer.theta.detach(), torch.ones(2, 2))
    as64 = qt.TorchLayer(layer_circuit, SHAPES, init={"theta": np.ones((2, 2))}, dtype=torch.float64)
    assert as64.theta.dtype == as64.phi.dtype == torch.float64
    # A parametrized weight is computed by the parametrization; gradients reach the original parameter.
    x = torch.tensor([[0.3, -0.4], [1.0, 0.2]])
    plain = qt.TorchLayer(layer_circuit, SHAPES)
    squashed = copy.deepcopy(plain)
    torch.nn.utils.parametrize.register_parametrization(squashed, "theta", torch.nn.Tanh())
    with torch.no_grad():
        plain.theta.copy_(torch.tanh(plain.theta))
    torch.testing.assert_close(squashed(x), plain(x))
    squashed(x).sum().backward()
    assert squashed.parametrizations.theta.original.grad is not None


def test_hybrid_classifier_trains():
    """Linear -> quantum layer -> Linear, trained with torch.optim on points inside / outside a circle."""
    rng = np.random.default_rng(0)
    points = rng.uniform(-1, 1, (200, 2)).astype(np.float32)
    labels = (np.linalg.norm(points, axis=1) < 0.75).astype(np.int64)
    chance = max(labels.mean(), 1 - labels.mean())  # always guessing the larger class
    x, y = torch.tensor(points), torch.tensor(labels)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2, 2), qt.TorchLayer(layer_circuit, SHAPES), torch.nn.Linear(3, 2)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=0.1)
    losses = []
    for _ in range(60):
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert losses[-1] < 0.5 * losses[0]
    assert accuracy > chance + 0.25, (accuracy, chance)


# --- straight-through argmax ----------------------------------------------------------------------


def test_straight_through_argmax_torch_and_jax_agree():
    logits = np.array([[0.2, 1.5, -0.3], [2.0, 0.1, 0.4]], np.float32)
    weights = np.array([1.0, 2.0, 3.0], np.float32)
    t = torch.tensor(logits, requires_grad=True)
    hard = qt.straight_through_argmax(t)
    np.testing.assert_array_equal(_np(hard), [[0, 1, 0], [1, 0, 0]])
    (hard * torch.tensor(weights)).sum().backward()
    # The chosen entry's gradient passes through; every other entry gets zero.
    np.testing.assert_array_equal(_np(t.grad), [[0, 2, 0], [1, 0, 0]])
    jax_hard = qfx.straight_through_argmax(jnp.asarray(logits))
    jax_grad = jax.grad(lambda z: jnp.sum(qfx.straight_through_argmax(z) * weights))(jnp.asarray(logits))
    assert tree_allclose((_np(hard), _np(t.grad)), (jax_hard, jax_grad))
    # Along another axis, under vmap, and as a module.
    np.testing.assert_array_equal(
        _np(qt.ArgMax(dim=0)(t)), np.asarray(qfx.straight_through_argmax(logits, axis=0))
    )
    vmapped = torch.func.vmap(
        torch.func.grad(lambda z: (qt.straight_through_argmax(z) * torch.tensor(weights)).sum())
    )
    assert tree_allclose(_np(vmapped(t.detach())), jax_grad)
    assert tree_allclose(jax.vmap(qfx.straight_through_argmax)(logits), _np(hard))
    # Through the bridge: qfx.torch.straight_through_argmax given a JAX array is the JAX function.
    assert tree_allclose(qt.straight_through_argmax(jnp.asarray(logits)), jax_hard)


def test_straight_through_argmax_higher_derivatives_hold_the_choice_fixed():
    # The derivative is that of x * one_hot with the one-hot a constant, so for h(z) = sum(w * st(z) * z**2)
    # the Hessian is diag(w * one_hot * (4 z + 2)): 2 w z (st's own derivative, twice) plus 2 w from z**2.
    z = np.array([0.2, 1.5, -0.3])
    w = np.array([1.0, 2.0, 3.0])
    one_hot = np.array([0.0, 1.0, 0.0])
    expected = np.diag(w * one_hot * (4 * z + 2))

    def h_torch(x):
        return (torch.tensor(w) * qt.straight_through_argmax(x) * x**2).sum()

    x = torch.tensor(z)
    assert tree_allclose(_np(torch.autograd.functional.hessian(h_torch, x, create_graph=True)), expected)
    assert tree_allclose(_np(torch.func.jacrev(torch.func.jacrev(h_torch))(x)), expected)
    with jax.enable_x64(True):
        hessian = jax.hessian(lambda v: jnp.sum(w * qfx.straight_through_argmax(v) * v**2))(jnp.asarray(z))
    assert tree_allclose(hessian, expected)


def test_straight_through_argmax_errors():
    with pytest.raises(TypeError, match="floating tensor, got dtype torch.int64"):
        qt.straight_through_argmax(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="real floating array, got dtype int32"):
        qfx.straight_through_argmax(jnp.array([1, 2], jnp.int32))
    with pytest.raises(ValueError, match="at least one dimension"):
        qfx.straight_through_argmax(jnp.float32(1.0))
    with pytest.raises(ValueError, match="axis=2 is out of range for shape \\(3,\\)"):
        qfx.straight_through_argmax(jnp.ones(3), axis=2)
    with pytest.raises(ValueError, match=r"dim=3 is out of range for shape \(2, 3\)"):  # an IndexError before
        qt.ArgMax(dim=3)(torch.ones(2, 3))


# --- GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@cuda
def test_cuda_tensors_stay_on_cuda():
    theta, x = (t.detach().cuda().requires_grad_() for t in _inputs())
    out = qt.to_torch(scalar)(theta, x)
    assert out.device == theta.device
    out.backward()
    assert theta.grad.device == theta.device
    a = qt.to_jax(theta)
    assert a.unsafe_buffer_pointer() == theta.data_ptr()
    layer = qt.TorchLayer(layer_circuit, SHAPES, device="cuda")
    assert layer(torch.rand(8, 2, device="cuda")).device.type == "cuda"
    # CPU tensors run on JAX's CPU device, though JAX's default is the GPU, and come back on the CPU.
    theta_cpu, x_cpu = _inputs()
    out_cpu = qt.to_torch(scalar)(theta_cpu, x_cpu)
    out_cpu.backward()
    assert out_cpu.device.type == theta_cpu.grad.device.type == "cpu"
    np.testing.assert_allclose(out_cpu.item(), out.item(), rtol=1e-5)
    np.testing.assert_allclose(theta_cpu.grad.numpy(), theta.grad.cpu().numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="different devices \\(cpu, cuda:0\\)"):
        qt.to_torch(scalar)(theta_cpu, x)


@pytest.mark.gpu
@cuda
def test_cuda_fast_paths_keep_the_streams_in_order():
    assert _cuda_paths(0) != (None, None)  # the extension converters passed their probe on this machine
    # Queue a lot of torch work on the input, then read it in JAX and the result back in torch at once: a
    # missing stream handshake either way would read stale or unwritten memory.
    double = qt.to_torch(lambda a: a * 2)
    for _ in range(3):
        x = torch.zeros(1 << 24, device="cuda")
        for _ in range(50):
            x.add_(1.0)
        y = double(x)
        assert y.device == x.device
        assert torch.all(y == 100.0).item()
