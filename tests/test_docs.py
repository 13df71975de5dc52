"""Every ```python example in qfx's docstrings runs as written (each in a fresh namespace that has only the
imports a user would write), so that examples cannot name variables defined only in the prose."""

import inspect
import re
import runpy
import sys

import pytest

import qfx
import qfx.diff
import qfx.torch  # noqa: F401  (loaded, so that its docstrings are collected)

_IMPORTS = "import jax\nimport jax.numpy as jnp\nimport equinox as eqx\nimport numpy as np\nimport qfx\n"


def _examples() -> dict[str, str]:
    found = {}
    modules = [m for name, m in sorted(sys.modules.items()) if name.split(".")[0] == "qfx" and m is not None]
    for module in modules:
        docs = [(module.__name__, inspect.getdoc(module))]
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            docs.append((f"{module.__name__}.{name}", inspect.getdoc(obj)))
            if inspect.isclass(obj):
                docs += [(f"{module.__name__}.{name}.{k}", inspect.getdoc(v)) for k, v in vars(obj).items()]
        for where, doc in docs:
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", doc or "", re.S)):
                found[f"{where}[{i}]"] = block
    return found


EXAMPLES = _examples()


def test_the_public_api_has_examples():
    assert len(EXAMPLES) >= 15
    for name in (
        "qfx._circuit.Repeat[0]",
        "qfx.diff._auto.Auto[0]",
        "qfx._statevector._backend.StateVector[0]",
        "qfx._control._operations.while_loop[0]",
        "qfx._statevector._functional.measure_state[0]",
    ):
        assert name in EXAMPLES


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docstring_example_runs(name, tmp_path):
    # From a file, as qfx.autograph needs the source of the functions it converts.
    path = tmp_path / "example.py"
    path.write_text(_IMPORTS + EXAMPLES[name])
    runpy.run_path(str(path), run_name="__example__")
