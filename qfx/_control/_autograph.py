"""`qfx.autograph`: Python `for` / `if` / `while` on traced values become JAX control flow.

The source-to-source conversion is diastatic-malt's (the maintained fork of TensorFlow's AutoGraph): it
rewrites each statement into a call such as `ag__.for_stmt(iter, extra_test, body, get_state, set_state,
names, opts)`, with the loop state read and written through `get_state` / `set_state`. This module
supplies those operators:

- on traced values, in a program on arrays (state vectors, parameters): `lax.fori_loop`, `lax.cond`,
  `lax.while_loop`;
- in a function that builds a circuit (its state holds a list of operations): the body's operations
  become one `qfx.for_loop` / `qfx.cond` / `qfx.while_loop` operation appended to that list; `if m:` and
  `while m:` on a measurement value (from `qfx.measure`) always do so;
- on Python values: Python's own statement, unchanged (static control flow stays static).

What cannot be converted raises an error naming the source line; nothing falls back to an unrolled loop.
"""

import ast
import functools
import importlib.util  # noqa: F401  (malt's converter uses importlib.util without importing it)
import inspect
import sys
import types
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from malt.core import converter
from malt.impl import api as malt_api
from malt.operators import variables as malt_variables
from malt.pyct import errors as malt_errors, origin_info
import numpy as np

from .._checks import is_concrete
from .._gates import AbstractOperation
from ._operations import MeasurementValue, MidMeasure, cond, for_loop, while_loop

_F = TypeVar("_F")

# Modules whose functions are called as they are, not converted (JAX, NumPy, qfx itself, ...).
_DO_NOT_CONVERT = ("jax", "jaxlib", "numpy", "equinox", "qfx", "malt", "optax", "builtins", "functools")


def _is_traced(x) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def _is_measurement(x) -> bool:
    return isinstance(x, (MeasurementValue, MidMeasure))


def _is_undefined(x) -> bool:
    return isinstance(x, (malt_variables.Undefined, malt_variables.UndefinedReturnValue))


# --- errors that name the user's line -----------------------------------------------------------------


class _Converter(malt_api.PyToPy):
    """malt's transpiler with this module's operators in the `ag__` namespace of converted code."""

    def __init__(self):
        super().__init__()
        self.source_maps: dict[str, dict] = {}

    def get_extra_locals(self):
        if self._extra_locals is None:
            namespace = super().get_extra_locals()["ag__"]
            ours = types.ModuleType("qfx_autograph_operators")
            ours.__dict__.update(namespace.__dict__)
            ours.__dict__.update(
                for_stmt=_for_stmt,
                if_stmt=_if_stmt,
                while_stmt=_while_stmt,
                converted_call=_converted_call,
                if_exp=_if_exp,
                not_=_not,
                and_=_and,
                or_=_or,
            )
            self._extra_locals = {"ag__": ours}
        return self._extra_locals

    def transform_ast(self, node, ctx):
        return super().transform_ast(_InPlaceUpdates().visit(_LoopElse().visit(node)), ctx)

    def convert(self, fn):
        options = converter.ConversionOptions(recursive=True, user_requested=True, optional_features=())
        converted, module, source_map = self.transform(fn, converter.ProgramContext(options=options))
        self.source_maps[module.__file__] = source_map
        return converted


# One converter per process: it caches the converted code of each function (like functools.cache).
_CONVERTER = _Converter()


def _user_line() -> str:
    """`file:line: source` of the innermost converted statement being run, from the call stack."""
    frame = sys._getframe(1)
    while frame is not None:
        source_map = _CONVERTER.source_maps.get(frame.f_code.co_filename)
        if source_map is not None:
            origin = source_map.get(origin_info.LineLocation(frame.f_code.co_filename, frame.f_lineno))
            if origin is not None:
                return f"{origin.loc.filename}:{origin.loc.lineno}: `{origin.source_code_line.strip()}`"
        frame = frame.f_back
    return "an unknown line"


def _error(cls, message: str) -> Exception:
    return cls(f"qfx.autograph, at {_user_line()}: {message}")


# --- conversion ---------------------------------------------------------------------------------------


def autograph(fn: _F) -> _F:
    """Converts Python `for i in range(n)`, `if` and `while` on traced values in `fn` into JAX control flow.

    In a program on arrays (for instance a state vector updated with `qfx.apply`), a loop over a traced
    `range` becomes `lax.fori_loop`, an `if` on a traced predicate `lax.cond`, a `while` on a traced
    condition `lax.while_loop`. In a function that builds a circuit (a list of operations is updated in the
    loop or branch), the body's operations become one `qfx.for_loop`, `qfx.cond` or `qfx.while_loop`
    appended to the list, and `if m:` / `while m:` on a measurement value (`m = qfx.measure(0)`) are
    conditionals on its outcome. Control flow on Python values stays Python (loops over `range(3)`
    unroll as usual). Functions that `fn` calls are converted too (those of JAX, NumPy and qfx are not).
    A loop's `else` clause runs as in Python: after the loop, unless a `break` of that loop ran.

    Not converted, with an error naming the line: `break` (or `return`) inside a converted loop,
    variables first assigned inside a converted loop or in only one branch, and branches or iterations
    that give a variable different types, and a function called inside a converted loop or branch that
    changes a list of the caller in place (traced once, it would append one iteration's operations). A loop
    that appends operations cannot also update arrays. Lists, dicts and arrays changed in place otherwise
    behave as in Python (a helper's `ops.append` reaches the caller's list), except in a loop or `if` on a
    traced value, whose results are new arrays: a list or dict it changes is rebound to a new one, which
    aliases made before it do not see. A traced `range` whose step is itself traced and 0 runs no iterations
    (Python raises; a step of 0 known at trace time raises here too).

    Gradients: `lax.fori_loop` and `lax.while_loop` with traced bounds allow only forward mode
    (`jax.jvp`, `jax.jacfwd`); `lax.cond` allows both. `malt.experimental.set_loop_options(
    maximum_iterations=k)` inside a `while m:` loop bounds it (`qfx.while_loop(..., max_iterations=k)`).

    **Arguments:**

    - `fn`: a Python function whose source is available (defined in a file).

    **Returns:** the converted function, with the same signature.

    ```python
    @qfx.autograph
    def program(theta, n):
        state = qfx.zero_state(1)
        for i in range(n):  # n traced: lax.fori_loop
            state = qfx.apply(qfx.RX(theta, wires=0), state)
        return state
    jax.make_jaxpr(program)(0.1, 5)
    ```
    """
    if not inspect.isfunction(fn):
        raise TypeError(f"qfx.autograph: expected a Python function, got {fn!r}.")
    try:
        converted = _CONVERTER.convert(fn)
    except malt_errors.InaccessibleSourceCodeError as e:
        raise ValueError(
            f"qfx.autograph: the source code of {fn.__qualname__} is not available (functions typed into an "
            "interactive shell have none); define it in a file."
        ) from e

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return converted(*args, **kwargs)

    wrapper.__wrapped_by_qfx_autograph__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _should_convert(f) -> bool:
    if not inspect.isfunction(f) or f.__name__ == "<lambda>":
        return False
    if getattr(f, "__wrapped_by_qfx_autograph__", False) or malt_api.is_autograph_artifact(f):
        return False  # already converted (e.g. a function defined inside a converted one)
    module = (getattr(f, "__module__", None) or "").split(".")[0]
    return module not in _DO_NOT_CONVERT


def _converted_call(f, args, kwargs, caller_fn_scope=None, options=None):
    del caller_fn_scope, options
    kwargs = kwargs or {}
    if f is range and _is_traced((args, kwargs)):
        return _TracedRange(*args, **kwargs)
    if _should_convert(f):
        try:
            f = _CONVERTER.convert(f)
        except malt_errors.InaccessibleSourceCodeError:
            pass  # called as it is; a traced range inside it still fails loudly (range of a tracer)
    return f(*args, **kwargs)


class _TracedRange:
    """`range(start, stop, step)` with a traced bound: iterated by `lax.fori_loop`."""

    def __init__(self, *args):
        if len(args) == 1:
            args = (0, args[0], 1)
        elif len(args) == 2:
            args = (args[0], args[1], 1)
        if is_concrete(args[2]) and np.ndim(args[2]) == 0 and np.asarray(args[2]) == 0:
            raise _error(ValueError, "range() arg 3 must not be zero.")
        self.start, self.stop, self.step = (jnp.asarray(a) for a in args)
        for a in (self.start, self.stop, self.step):
            if not jnp.issubdtype(a.dtype, jnp.integer) or a.shape != ():
                raise _error(TypeError, f"range() needs integer scalars, got {a.dtype}{list(a.shape)}.")

    def count(self) -> jax.Array:
        span = self.stop - self.start
        n = jnp.where(self.step > 0, (span + self.step - 1) // self.step, (span + self.step + 1) // self.step)
        return jnp.maximum(n, 0).astype(jnp.int32)

    def index(self, k) -> jax.Array:
        return (self.start + k * self.step).astype(jnp.int32)


# --- loops with an `else` clause ------------------------------------------------------------------


class _LoopElse(ast.NodeTransformer):
    """Rewrites `for` / `while` loops with an `else` clause, which malt refuses to convert, into loops
    without one, exactly: the `else` statements follow the loop, and when the loop has a `break` of its own
    they run under `if flag:`, a flag set before the loop and cleared by each of its `break`s. (A `break` in
    a loop on a traced value is refused later, with the line, as for any such loop.)"""

    def __init__(self):
        self.count = 0

    def _loop(self, node):
        self.generic_visit(node)  # inner loops first: a `break` in an inner loop's `else` is this loop's
        if not node.orelse:
            return node
        orelse, node.orelse = node.orelse, []
        flag = f"qfx_loop_not_broken_{self.count}"
        marker = _MarkBreaks(flag)
        node.body = [marker.visit(stmt) for stmt in node.body]
        node.body = [x for stmt in node.body for x in (stmt if isinstance(stmt, list) else [stmt])]
        if not marker.found:
            return [node, *orelse]
        self.count += 1
        before = ast.parse(f"{flag} = True").body[0]
        after = ast.If(test=ast.Name(flag, ast.Load()), body=orelse, orelse=[])
        return [ast.fix_missing_locations(ast.copy_location(x, node)) for x in (before, node, after)]

    visit_For = visit_While = visit_AsyncFor = _loop


class _MarkBreaks(ast.NodeTransformer):
    """`break` -> `flag = False; break` for the breaks of one loop (not those of nested loops or
    functions)."""

    def __init__(self, flag: str):
        self.flag, self.found = flag, False

    def visit_Break(self, node):
        self.found = True
        clear = ast.fix_missing_locations(ast.copy_location(ast.parse(f"{self.flag} = False").body[0], node))
        return [clear, node]

    def _skip(self, node):
        return node

    visit_For = visit_While = visit_AsyncFor = visit_FunctionDef = visit_AsyncFunctionDef = _skip
    visit_ClassDef = visit_Lambda = _skip


# --- containers changed in place -------------------------------------------------------------------

# Methods that change a list, dict or set in place; not names common on other objects (`update`, `add`,
# `clear`: optimizers, counters, progress bars), whose owners would be taken for loop state.
_MUTATORS = frozenset("append extend insert pop remove sort reverse setdefault popitem discard".split())


class _InPlaceUpdates(ast.NodeTransformer):
    """Marks in-place updates of a function's own variables (`ops.append(x)`, `d[k] = v`, `x[i] += 1`) with
    a rebinding `name = name` after the statement (`self.ops = self.ops` for `self.ops.append(x)`).

    malt takes the state of a converted loop or branch from the names it assigns; a list that a branch
    only appends to would not be part of it, and both branches (traced once each) would append to the same
    list. Marked, the name is state: the operators here hand each run of a body its own copy, and Python's
    semantics are otherwise unchanged (the list is changed in place, aliases see it, a helper that appends
    to a list it is given appends to the caller's). Names that a nested function only reads from the
    enclosing one are not marked (an assignment would make them local to it); attributes are (assigning
    one binds no name).
    """

    def visit_FunctionDef(self, node):
        bound = _bound_names(node)
        node.body = self._block(node.body, bound)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def _block(self, statements, bound: set[str]) -> list:
        out = []
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(self.visit(stmt))
                continue
            for field in ("body", "orelse", "finalbody"):
                if isinstance(getattr(stmt, field, None), list):
                    setattr(stmt, field, self._block(getattr(stmt, field), bound))
            for handler in getattr(stmt, "handlers", []):
                handler.body = self._block(handler.body, bound)
            for case in getattr(stmt, "cases", []):
                case.body = self._block(case.body, bound)
            out.append(stmt)
            compound = hasattr(stmt, "body")
            for target in _updated_in_place(stmt, compound, bound):
                mark = ast.parse(f"{target} = {target}").body[0]
                out.append(ast.fix_missing_locations(ast.copy_location(mark, stmt)))
        return out


def _updated_in_place(stmt, compound: bool, bound: set[str]) -> list[str]:
    """The local names and attributes (`self.ops`) whose value `stmt` changes in place (in its own
    expressions, not in a compound statement's body, which is marked statement by statement)."""
    nodes = []
    if compound:  # the test of an `if` / `while`, the iterable of a `for`, the items of a `with`
        for field in ("test", "iter", "items", "subject"):
            value = getattr(stmt, field, None)
            nodes.extend(value if isinstance(value, list) else [value] if value is not None else [])
    else:
        nodes.append(stmt)
    changed = []
    for root in nodes:
        for node in ast.walk(root):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
            ):
                changed.append(node.func.value)
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            changed += [t.value for t in targets if isinstance(t, ast.Subscript)]
    out = []
    for node in changed:
        while isinstance(node, ast.Subscript):  # `d["ops"].append(x)`, `x[i][j] = v`: `d`, `x` change
            node = node.value
        if (isinstance(node, ast.Name) and node.id in bound) or _is_attribute_path(node):
            out.append(ast.unparse(node))
    return sorted(set(out))


def _is_attribute_path(node) -> bool:
    """`a.b` or `a.b.c`: names joined by attribute access."""
    if not isinstance(node, ast.Attribute):
        return False
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _bound_names(fn) -> set[str]:
    """The names local to `fn`: its parameters and what its own body binds (not nested functions')."""
    args = fn.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    declared = set()
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared |= set(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        elif isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared


def _fresh(value):
    """A copy of `value`'s containers (lists, dicts, tuples, modules) and NumPy arrays, sharing the rest:
    what one run of a converted body may change in place without touching the other runs' values."""
    return jax.tree.map(lambda x: x.copy() if isinstance(x, np.ndarray) else x, value)


def _same(a, b) -> bool:
    """Whether `b` holds what `a` holds: the same structure and the same leaves (equal NumPy arrays)."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(
        x is y or (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _outer_lists(state_names, *fns) -> list[tuple[str, list, list]]:
    """The lists that the converted `fns` (a body, a branch) reach through their closures, directly or
    through a nested function they call, with a copy of their contents; not the loop's or branch's state
    (`state_names`), which each run gets a copy of."""
    found, seen, stack = [], set(), [(f, 0) for f in fns]
    while stack:
        fn, depth = stack.pop()
        if id(fn) in seen or not callable(fn):
            continue
        seen.add(id(fn))
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
        for name, cell in zip(code.co_freevars if code else (), cells, strict=False):
            try:
                value = cell.cell_contents
            except ValueError:  # not assigned yet
                continue
            if isinstance(value, list) and name not in state_names:
                found.append((name, value, value.copy()))
            elif inspect.isfunction(value) and depth < 2:
                stack.append((value, depth + 1))
    return found


def _check_untouched(outer, where: str) -> None:
    """Raises if a staged body appended operations to one of the `outer` lists (see `_outer_lists`) from a
    function it called: traced once, the loop would hold one iteration's operations (other values, caches
    or logs, are the caller's business)."""
    for name, value, before in outer:
        kept = len(value) >= len(before) and all(x is y for x, y in zip(value, before, strict=False))
        added = value[len(before) :] if kept else value
        if any(isinstance(x, AbstractOperation) for x in added):
            raise _error(
                ValueError,
                f"`{name}` is changed in place by a function called inside {where}; a converted loop or "
                f"branch sees only the updates its own statements make. Update `{name}` there (e.g. "
                f"`{name} += helper(...)`, with `helper` returning the operations), or use a static range.",
            )


# --- helpers for the loop state -----------------------------------------------------------------------


def _check_defined(names, values, where: str) -> None:
    for name, value in zip(names, values, strict=True):
        if _is_undefined(value):
            what = "a `return`" if name in ("retval_", "do_return") else f"the variable `{name}`"
            raise _error(
                ValueError,
                f"{what} is not defined on every path through {where}; a converted loop or branch needs a "
                "value before it (and in both branches of an if).",
            )


def _op_lists(values) -> list[int]:
    """Positions of state variables that are lists of operations (a circuit being built)."""
    return [
        k
        for k, v in enumerate(values)
        if isinstance(v, list) and all(isinstance(x, AbstractOperation) for x in v)
    ]


def _as_carry(names, values):
    out = []
    for name, v in zip(names, values, strict=True):
        leaves = jax.tree.leaves(v)
        if not all(
            isinstance(x, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)) for x in leaves
        ):
            raise _error(
                TypeError,
                f"the variable `{name}` changes in a converted loop but holds {type(v).__name__}, not "
                "arrays.",
            )
        out.append(jax.tree.map(jnp.asarray, v))
    return tuple(out)


def _check_same_types(names, before, after, where: str) -> None:
    for name, a, b in zip(names, before, after, strict=True):
        sa, sb = jax.tree.structure(a), jax.tree.structure(b)
        ta = [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(a)]
        tb = [(jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(b)]
        if sa != sb or ta != tb:
            before_, after_ = (
                ", ".join(f"{d}{list(s)}" for s, d in t) or str(st) for t, st in ((ta, sa), (tb, sb))
            )
            raise _error(
                TypeError,
                f"the variable `{name}` has type {before_} before {where} but {after_} after it; give it "
                "its final type (dtype and shape) before, e.g. `x = 0.0` rather than `x = 0`.",
            )


def _ops_of_body(run, init, lists, names, where: str) -> tuple[int, list]:
    """Runs `run()` (a loop body or branch) from fresh empty operation lists, and returns which list it
    appended to and the operations it appended."""
    start = tuple([] if k in lists else _fresh(v) for k, v in enumerate(init))
    out = run(start)
    changed = [k for k in lists if out[k]]
    for k in changed:
        other = next((x for x in out[k] if not isinstance(x, AbstractOperation)), None)
        if other is not None:
            raise _error(
                TypeError,
                f"{where} appends {type(other).__name__} to the list `{names[k]}`; a list that such a loop "
                "or branch appends to is taken for a circuit being built and holds operations only. To "
                "collect values, write them into an array (`x = x.at[i].set(...)`), or use a static range.",
            )
    for k, (a, b) in enumerate(zip(init, out, strict=True)):
        if k not in lists and not _same(a, b) and names[k] not in ("do_return", "retval_"):
            raise _error(
                ValueError,
                f"{where} appends operations to a circuit, so it cannot also update `{names[k]}`: compute "
                "values from the loop index or before the loop.",
            )
        if names[k] in ("do_return", "retval_") and not _same(a, b):
            raise _error(ValueError, f"a `return` inside {where} that builds a circuit is not supported.")
    if len(changed) > 1:
        raise _error(ValueError, f"{where} appends to several lists of operations; use one list.")
    return (changed[0] if changed else (lists[0] if lists else -1)), (out[changed[0]] if changed else [])


# --- for ----------------------------------------------------------------------------------------------


def _for_stmt(iter_, extra_test, body, get_state, set_state, symbol_names, opts):
    if not isinstance(iter_, _TracedRange):  # static: Python's own loop
        for target in iter_:
            if extra_test is not None and not extra_test():
                break
            body(target)
        return
    if extra_test is not None:
        raise _error(
            ValueError,
            "`break` (or `return`) inside a `for` loop over a traced range cannot be converted to "
            "lax.fori_loop; use a `while` loop with the exit condition, or a static range.",
        )
    init = get_state()
    _check_defined(symbol_names, init, "a `for` loop over a traced range")
    lists = _op_lists(init)
    outer = _outer_lists(symbol_names, body)
    if lists:
        _for_circuit(iter_, body, get_state, set_state, symbol_names, init, lists)
        _check_untouched(outer, "a `for` loop over a traced range")
        return
    carry = _as_carry(symbol_names, init)

    def step(k, carry):
        set_state(carry)
        body(iter_.index(k))
        out = get_state()
        _check_defined(symbol_names, out, "a `for` loop over a traced range")
        _check_same_types(symbol_names, carry, out, "an iteration of the `for` loop")
        return tuple(out)

    out = jax.lax.fori_loop(jnp.int32(0), iter_.count(), step, carry)
    _check_untouched(outer, "a `for` loop over a traced range")
    set_state(out)


def _for_circuit(iter_, body, get_state, set_state, names, init, lists):
    def run(state, k):
        set_state(state)
        body(iter_.index(k))
        return get_state()

    where = "a `for` loop over a traced range"
    zero = jnp.zeros((), jnp.int32)
    target, _ = _ops_of_body(lambda s: run(s, zero), init, lists, names, where)
    if target < 0:
        set_state(init)
        return

    def iteration_ops(k):
        return _ops_of_body(lambda s: run(s, k), init, lists, names, where)[1]

    # The closure (parameters computed outside the loop, traced or not) becomes the body's leaves.
    body_fn = eqx.filter_closure_convert(iteration_ops, zero)
    init[target].append(for_loop(iter_.count(), body_fn))  # in place, as Python's loop would
    set_state(init)


# --- if -----------------------------------------------------------------------------------------------


def _if_stmt(cond_, body, orelse, get_state, set_state, symbol_names, nouts):
    del nouts
    measured = _is_measurement(cond_)
    if not measured and not _is_traced(cond_):
        body() if cond_ else orelse()
        return
    init = get_state()
    lists = _op_lists(init)
    outer = _outer_lists(symbol_names, body, orelse)
    where = "an `if` on a traced or measured value"
    if measured or lists:
        _if_circuit(cond_, body, orelse, set_state, get_state, symbol_names, init, lists)
        _check_untouched(outer, where)
        return
    pred = jnp.asarray(cond_)
    if pred.shape != ():
        raise _error(ValueError, f"the condition of an `if` must be a scalar, got shape {pred.shape}.")

    statics: list = []

    def branch(fn, force):
        def run(_):
            set_state(_fresh(init))
            fn()
            out = get_state()
            _check_defined(symbol_names, out, "an `if` on a traced value")
            out = tuple(jnp.asarray(v) if k in force else v for k, v in enumerate(out))
            dynamic, static = eqx.partition(out, eqx.is_array)
            statics.append(static)
            return dynamic

        return run

    def staged(force):
        statics.clear()
        out = jax.lax.cond(pred.astype(bool), branch(body, force), branch(orelse, force), None)
        return out, statics[0], statics[1]

    try:
        out, static_true, static_false = staged(set())
        if not eqx.tree_equal(static_true, static_false):
            # Python values that differ between the branches become arrays.
            differ = {
                k
                for k, (a, b) in enumerate(zip(static_true, static_false, strict=True))
                if not eqx.tree_equal(a, b)
            }
            out, static_true, _ = staged(differ)
    except TypeError as e:
        if "branch" not in str(e) and "true_fun" not in str(e):
            raise
        raise _error(
            TypeError,
            f"the branches of an `if` on a traced value give different types to {', '.join(symbol_names)} "
            f"(or return different types): {e}",
        ) from e
    _check_untouched(outer, where)
    set_state(eqx.combine(out, static_true))


def _if_circuit(cond_, body, orelse, set_state, get_state, names, init, lists):
    if not lists:
        raise _error(
            ValueError,
            "an `if` on a measurement value needs a list of operations that the branches append to "
            "(`ops.append(...)`); measurement values are only known during the simulation.",
        )

    def run(fn):
        def go(state):
            set_state(state)
            fn()
            return get_state()

        return go

    where = "an `if` on a traced or measured value"
    k_true, ops_true = _ops_of_body(run(body), init, lists, names, where)
    k_false, ops_false = _ops_of_body(run(orelse), init, lists, names, where)
    if ops_true and ops_false and k_true != k_false:
        raise _error(ValueError, "the branches of the `if` append to different lists of operations.")
    target = k_true if ops_true else k_false
    init[target].append(cond(cond_, ops_true, ops_false or None))
    set_state(init)


# --- while --------------------------------------------------------------------------------------------


def _while_stmt(test, body, get_state, set_state, symbol_names, opts):
    first = test()  # once, as Python does before the first iteration (it may have side effects)
    converted = _is_measurement(first) or _is_traced(first)
    if converted and any(name.startswith("break_") for name in symbol_names):
        raise _error(
            ValueError,
            "`break` inside a `while` loop on a traced or measured condition cannot be converted; put "
            "the exit condition into the loop's condition.",
        )
    outer = _outer_lists(symbol_names, test, body) if converted else []
    where = "a `while` loop on a traced or measured condition"
    if _is_measurement(first):
        _while_circuit(first, body, get_state, set_state, symbol_names, opts)
        _check_untouched(outer, where)
        return
    if not _is_traced(first):
        iterations = 0
        while True:
            t = test() if iterations else first
            if _is_traced(t) or _is_measurement(t):
                raise _error(
                    ValueError,
                    "the condition of this `while` loop became traced after it started as a Python value; "
                    "make it traced from the start (e.g. jnp.asarray) so that the loop is converted.",
                )
            if not t:
                return
            body()
            iterations += 1
    init = get_state()
    _check_defined(symbol_names, init, "a `while` loop on a traced condition")
    if _op_lists(init):
        raise _error(
            ValueError,
            "a `while` loop on a traced array cannot build a circuit; loop on a measurement value "
            "(`while m:`) or over a range.",
        )
    carry = _as_carry(symbol_names, init)

    def cond_fn(carry):
        set_state(carry)
        t = jnp.asarray(test())
        if t.shape != ():
            raise _error(
                ValueError, f"the condition of a `while` loop must be a scalar, got shape {t.shape}."
            )
        return t.astype(bool)

    def body_fn(carry):
        set_state(carry)
        body()
        out = get_state()
        _check_defined(symbol_names, out, "a `while` loop on a traced condition")
        _check_same_types(symbol_names, carry, out, "an iteration of the `while` loop")
        return tuple(out)

    out = jax.lax.while_loop(cond_fn, body_fn, carry)
    _check_untouched(outer, where)
    set_state(out)


def _while_circuit(condition, body, get_state, set_state, names, opts):
    init = get_state()
    lists = _op_lists(init)
    if not lists:
        raise _error(
            ValueError,
            "a `while` loop on a measurement value needs a list of operations that the body appends to.",
        )

    def run(state):
        set_state(state)
        body()
        return get_state()

    target, ops = _ops_of_body(run, init, lists, names, "a `while` loop on a measured value")
    init[target].append(while_loop(condition, ops, max_iterations=opts.get("maximum_iterations")))
    set_state(init)


# --- expressions --------------------------------------------------------------------------------------


def _if_exp(cond_, if_true, if_false, expr_repr):
    del expr_repr
    if _is_traced(cond_):
        return jax.lax.cond(jnp.asarray(cond_).astype(bool), lambda: if_true(), lambda: if_false())
    return if_true() if cond_ else if_false()


def _not(a):
    if _is_traced(a):
        return jnp.logical_not(a)
    if _is_measurement(a):
        return ~a
    return not a


def _and(a, b):
    x = a()
    if _is_traced(x):
        return jnp.logical_and(x, b())
    if _is_measurement(x):  # logical, not bitwise: a sum of outcomes (m0 + m1 == 2) is true
        return (x != 0) & (b() != 0)
    return x and b()


def _or(a, b):
    x = a()
    if _is_traced(x):
        return jnp.logical_or(x, b())
    if _is_measurement(x):
        return (x != 0) | (b() != 0)
    return x or b()
