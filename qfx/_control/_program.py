"""Static analysis of a circuit's control flow: which operations it holds, its classical registers."""

import jax
import jax.numpy as jnp

from .._circuit import Repeat, relabel_ops
from ._operations import AbstractControlOperation, Cond, ForLoop, MidMeasure, WhileLoop, _format, expr_refs

# --- static analysis ----------------------------------------------------------------------------------


def has_control(ops) -> bool:
    """Whether `ops` (a circuit's) hold any control-flow operation or measurement, Repeat bodies included
    (read from the operations' types first, as `has_channels` is)."""
    kinds = set(map(type, ops))
    if any(issubclass(k, AbstractControlOperation) for k in kinds):
        return True
    return any(issubclass(k, Repeat) for k in kinds) and any(
        has_control(op.body.ops) for op in ops if isinstance(op, Repeat)
    )


def _loop_tokens(ops, alias: dict) -> list:
    """Tokens of the measurements a loop body holds that the enclosing scope does not know (those it made
    when called), in order; not inside nested loop bodies (they have their own)."""
    out: list = []

    def visit(ops):
        for op in ops:
            if isinstance(op, MidMeasure) and op.token not in alias and op.token not in out:
                out.append(op.token)
            elif isinstance(op, Repeat):
                visit(op.body.ops)
            elif isinstance(op, Cond):
                for b in op.branches:
                    visit(b.ops)
            elif isinstance(op, WhileLoop):
                visit(op.body.ops)

    visit(ops)
    return out


class Program:
    """The classical registers of a circuit, keyed by measurement token through `alias` (token -> register
    key). A measurement of the circuit (its branches, Repeat bodies and loop arguments included) has the
    register `("m", id)`, `id` its number in the circuit; those a `for_loop` body makes afresh at each call
    (new tokens each time) are keyed by the loop's position and their order in the body."""

    def __init__(self, ops):
        self.slots: dict = {}
        self.referenced: list = []  # (register key, reference) of every read
        self.read_early: list = []  # (register key, reference) read before their measurement runs
        self.num_measurements = 0
        # Where each register is live, in positions of the top-level operations: from its first
        # measurement to its last measurement or read (a register may be measured again, in a loop or by
        # the same operation used twice). Two registers whose spans do not meet can share storage.
        self.spans: dict = {}
        # Post-selection that an outcome drawn at random may precede (see `simulate`, in
        # `qfx/_statevector/_simulators.py`): the first such one.
        self.drawn, self.postselected = 0, 0
        self.postselected_after_drawn: str | None = None
        numbering: dict = {}
        relabel_ops(tuple(ops), numbering)  # the circuit's own numbering (ops need not be a Circuit's)
        self.alias = {token: ("m", k) for token, k in numbering.items()}
        self._visit(ops, self.alias, ())
        missing = [ref for key, ref in self.referenced if key not in self.slots]
        if missing:
            raise ValueError(
                f"A condition reads the outcome {_format(missing[0])}, but that measurement is not in the "
                "circuit; "
                "put the qfx.measure(...) operation in the circuit before the condition that reads it."
            )
        if self.read_early:
            raise ValueError(
                f"A condition reads the outcome {_format(self.read_early[0][1])} before that measurement "
                "runs (it would read 0); put the qfx.measure(...) operation before the condition that reads "
                "it."
            )

    def _touch(self, key, at: int) -> None:
        first, last = self.spans.get(key, (at, at))
        self.spans[key] = (min(first, at), max(last, at))

    def _read(self, expr, alias, at: int) -> None:
        for r in expr_refs(expr):
            key = alias.get(r[2].token)
            self.referenced.append((key, r))
            if key not in self.slots:
                self.read_early.append((key, r))
            else:
                self._touch(key, at)

    def _visit(self, ops, alias, path):
        for j, op in enumerate(ops):
            p = path + (j,)
            if isinstance(op, MidMeasure):
                self.num_measurements += 1
                self.slots.setdefault(alias[op.token], len(self.slots))
                self._touch(alias[op.token], p[0])
                if op.postselect is None:
                    self.drawn += 1
                else:
                    self.postselected += 1
                    if self.drawn and self.postselected_after_drawn is None:
                        self.postselected_after_drawn = (
                            f"{op!r} post-selects after an outcome drawn at random"
                        )
            elif isinstance(op, Repeat):
                # One layer: a for_loop in the body builds its operations from one layer's arguments.
                body = op.layer(0) if op.length else op.body
                self._visit_loop(body.ops, alias, p)
            elif isinstance(op, Cond):
                if op.expr is not None:
                    self._read(op.expr, alias, p[0])
                for k, b in enumerate(op.branches):
                    self._visit(b.ops, alias, p + (k,))
            elif isinstance(op, WhileLoop):
                self._read(op.expr, alias, p[0])
                self._visit_loop(op.body.ops, alias, p)
            elif isinstance(op, ForLoop):
                body, inner = loop_body(op, jax.ShapeDtypeStruct((), jnp.int32), alias, p)
                self._visit_loop(body, inner, p)

    def _visit_loop(self, ops, alias, path):
        """A body run repeatedly: a measurement drawn in one iteration precedes those of the next."""
        drawn, postselected, early = self.drawn, self.postselected, len(self.read_early)
        self._visit(ops, alias, path)
        # A read of a measurement made later in the same body reads the previous iteration's outcome
        # (feedback; 0 in the first iteration), not one that runs after the loop.
        self.read_early[early:] = [(k, r) for k, r in self.read_early[early:] if k not in self.slots]
        if self.drawn > drawn and self.postselected > postselected and self.postselected_after_drawn is None:
            self.postselected_after_drawn = (
                "a loop body both post-selects and draws outcomes at random (an outcome of one iteration "
                "precedes the post-selection of the next)"
            )

    def slot(self, token, alias: dict) -> int:
        return self.slots[alias[token]]


def loop_body(op: ForLoop, i, alias: dict, path: tuple):
    """The operations of iteration `i`, and `alias` extended with the measurements this call made afresh.

    Every call of the body makes new tokens (the shape-only call that `Program` makes and the traced one
    that `traverse` makes differ), so those are keyed by their order in the body, the same in every call."""
    if isinstance(i, jax.ShapeDtypeStruct):
        ops = op.skeleton()
    else:
        ops = op.ops_at(i)
    fresh = _loop_tokens(ops, alias)
    inner = dict(alias)
    inner.update({token: ("loop", path, k) for k, token in enumerate(fresh)})
    return ops, inner
