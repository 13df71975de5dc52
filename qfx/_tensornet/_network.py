"""Networks and their contraction paths: light cones, equations, cached paths (shapes only, no values)."""

import copy
import functools
import itertools

import equinox as eqx
import numpy as np
import opt_einsum

_PAULI = {
    "X": np.array([[0, 1], [1, 0]]),
    "Y": np.array([[0, -1j], [1j, 0]]),
    "Z": np.array([[1, 0], [0, -1]]),
}
_COPY = np.zeros((2, 2, 2))
_COPY[0, 0, 0] = _COPY[1, 1, 1] = 1
# How many networks of one structure are kept (each holds an equation and a path).
_CACHE_SIZE = 4096


# --- the network -----------------------------------------------------------------------------------
#
# A network is static: the modes of each operand, the output modes, a recipe saying where each operand's
# values come from, and the contraction path. Recipes:
#   ("zero",)            |0> on one wire
#   ("gate", i, conj)    gate i of the unrolled circuit as a (2,)*2k tensor, conjugated on the bra side
#   ("pauli", letter)    a Pauli matrix (bra index, ket index)
#   ("hermitian",)       the term's matrix as a (2,)*2k tensor (bra indices, ket indices)
#   ("copy",)            the (2, 2, 2) copy tensor that opens a measured wire
#   ("bit", w)           the one-hot vector of bit w of the bitstring


class _Network(eqx.Module):
    inputs: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    output: tuple[int, ...] = eqx.field(static=True)
    recipe: tuple[tuple, ...] = eqx.field(static=True)
    path: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    flops: float = eqx.field(static=True)
    # The number of entries of the largest intermediate tensor along the path.
    largest: int = eqx.field(static=True)

    @property
    def equation(self) -> str:
        sym = opt_einsum.get_symbol
        ins = ",".join("".join(sym(m) for m in modes) for modes in self.inputs)
        return ins + "->" + "".join(sym(m) for m in self.output)

    @property
    def shape_key(self) -> tuple:
        """Networks with equal keys contract the same way and can be stacked."""
        return self.inputs, self.output, self.path


def _light_cone(skeleton: tuple[tuple[int, ...], ...], wires) -> tuple[tuple[int, ...], set[int]]:
    """The gates (indices into the skeleton) that can influence `wires` at the end, and their wires."""
    live = set(wires)
    keep = []
    for i in reversed(range(len(skeleton))):
        if live.intersection(skeleton[i]):
            keep.append(i)
            live.update(skeleton[i])
    return tuple(reversed(keep)), live


def _sandwich(skeleton, wires) -> tuple[list, list, dict, dict, itertools.count]:
    """The ket and bra halves of `<0|C^dagger . C|0>` on the light cone of `wires`, left open at the end.

    Returns the operand modes, their recipes, the final ket and bra mode of each wire in the cone, and
    the mode counter."""
    keep, cone = _light_cone(skeleton, wires)
    cone = sorted(cone)
    new = itertools.count()
    inputs, recipe = [], []
    finals = []
    for conj in (False, True):
        mode = {w: next(new) for w in cone}
        for w in cone:
            inputs.append((mode[w],))
            recipe.append(("zero",))
        for i in keep:
            gw = skeleton[i]
            outs = tuple(next(new) for _ in gw)
            inputs.append(outs + tuple(mode[w] for w in gw))
            recipe.append(("gate", i, conj))
            mode.update(zip(gw, outs, strict=True))
        finals.append(mode)
    return inputs, recipe, finals[0], finals[1], new


# The largest networks opt_einsum's exhaustive searches are allowed (a 2-qubit circuit of a few gates already
# makes 9 to 23 tensors). Their cost grows exponentially with the number of tensors: beyond these
# sizes they took seconds or did not end (measurements: README.md).
_EXHAUSTIVE_MAX_TENSORS = {"optimal": 8, "branch-all": 12, "branch-2": 16}


def _close(inputs, output, recipe, optimize) -> _Network:
    """Renames modes in order of appearance (so congruent networks are equal) and finds the path."""
    names: dict[int, int] = {}
    for m in itertools.chain(*inputs, output):
        names.setdefault(m, len(names))
    inputs = tuple(tuple(names[m] for m in t) for t in inputs)
    output = tuple(names[m] for m in output)
    sym = opt_einsum.get_symbol
    equation = ",".join("".join(sym(m) for m in t) for t in inputs) + "->" + "".join(sym(m) for m in output)
    shapes = [(2,) * len(t) for t in inputs]
    if len(inputs) == 1:
        path, flops, largest = ((0,),), 0.0, 2 ** len(inputs[0])
    else:
        if not isinstance(optimize, str):  # an optimizer object serves one contraction: a copy each
            optimize = copy.deepcopy(optimize)
        elif len(inputs) > _EXHAUSTIVE_MAX_TENSORS.get(optimize, len(inputs)):
            raise ValueError(
                f"TensorNetwork: optimize={optimize!r} searches contraction orders exhaustively, which for "
                f"this network of {len(inputs)} tensors would not finish (it is for at most "
                f"{_EXHAUSTIVE_MAX_TENSORS[optimize]}). Use 'auto' (the default), 'auto-hq' or 'dp'."
            )
        path, info = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=optimize)
        path, flops, largest = tuple(map(tuple, path)), float(info.opt_cost), int(info.largest_intermediate)
    return _Network(inputs, output, tuple(recipe), path, flops, largest)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _expval_network(skeleton, term: tuple, optimize) -> _Network:
    """`<0|C^dagger T C|0>` for a Pauli word `("pauli", word)` or a matrix `("hermitian", wires)`."""
    kind, spec = term
    wires = tuple(w for w, _ in spec) if kind == "pauli" else spec
    inputs, recipe, ket, bra, _ = _sandwich(skeleton, wires)
    if kind == "pauli":
        for w, letter in spec:
            inputs.append((bra[w], ket[w]))
            recipe.append(("pauli", letter))
    else:
        inputs.append(tuple(bra[w] for w in wires) + tuple(ket[w] for w in wires))
        recipe.append(("hermitian",))
    # The identity on the other wires of the cone joins each bra to its ket.
    join = {bra[w]: ket[w] for w in ket if w not in wires}
    inputs = [tuple(join.get(m, m) for m in t) for t in inputs]
    return _close(inputs, (), recipe, optimize)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _probs_network(skeleton, wires: tuple[int, ...], optimize) -> _Network:
    """`<0|C^dagger (|x><x|_wires (x) I) C|0>` with the bits x of `wires` left open, in that order."""
    inputs, recipe, ket, bra, new = _sandwich(skeleton, wires)
    output = tuple(next(new) for _ in wires)
    for w, out in zip(wires, output, strict=True):
        inputs.append((ket[w], bra[w], out))
        recipe.append(("copy",))
    join = {bra[w]: ket[w] for w in ket if w not in wires}
    inputs = [tuple(join.get(m, m) for m in t) for t in inputs]
    return _close(inputs, output, recipe, optimize)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _amplitude_network(skeleton, num_wires: int, optimize) -> _Network:
    """`<b|C|0>`: the whole circuit (no light cone applies), closed by one-hot vectors."""
    new = itertools.count()
    mode = {w: next(new) for w in range(num_wires)}
    inputs = [(mode[w],) for w in range(num_wires)]
    recipe = [("zero",)] * num_wires
    for i, gw in enumerate(skeleton):
        outs = tuple(next(new) for _ in gw)
        inputs.append(outs + tuple(mode[w] for w in gw))
        recipe.append(("gate", i, False))
        mode.update(zip(gw, outs, strict=True))
    for w in range(num_wires):
        inputs.append((mode[w],))
        recipe.append(("bit", w))
    return _close(inputs, (), recipe, optimize)


def clear_cache() -> None:
    """Forgets every cached network and contraction path."""
    for fn in (_expval_network, _probs_network, _amplitude_network):
        fn.cache_clear()
