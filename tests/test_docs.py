"""Every ```python example in qfx's docstrings runs as written (each in a fresh namespace that has only the
imports a user would write), so that examples cannot name variables defined only in the prose; every
```python block of the documentation site (docs/) runs, page by page; and the site builds with
`mkdocs build --strict`, its API reference covering every public name."""

import importlib.util
import inspect
import os
import pathlib
import re
import runpy
import subprocess
import sys
import zlib

import jax
import pytest
import torch

import qfx
import qfx.diff
import qfx.torch  # loaded, so that its docstrings are collected

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


# --- The documentation site (docs/, mkdocs.yml) ---------------------------------------------------------

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_DOCS = _ROOT / "docs"


def _page_blocks(page: pathlib.Path) -> list[str]:
    """The ```python blocks of a page of the site, in order (other languages, e.g. ```bash, are not run)."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


PAGES = {str(p.relative_to(_DOCS)): p for p in sorted(_DOCS.rglob("*.md")) if _page_blocks(p)}


def test_the_guides_have_examples():
    assert {"index.md", "getting-started.md"} <= set(PAGES)
    guides = {p.name for p in (_DOCS / "guides").glob("*.md")}
    assert len(guides) >= 8 and all(f"guides/{g}" in PAGES for g in guides)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_docs_page_runs(page, tmp_path):
    # A page's blocks run in order in one namespace, as a reader runs them; each page starts afresh. From
    # a file, as qfx.autograph needs the source of the functions it converts. With JAX's default dtype
    # promotion, which readers have (tests/conftest.py makes it strict, which Optax's Adam fails).
    path = tmp_path / "page.py"
    path.write_text("\n".join(_page_blocks(PAGES[page])))
    threads = torch.get_num_threads()  # the Torch guide sets 1, as it advises; later tests keep theirs
    try:
        with jax.numpy_dtype_promotion("standard"):
            runpy.run_path(str(path), run_name="__docs__")
    finally:
        torch.set_num_threads(threads)


def _inventory(site: pathlib.Path) -> set[str]:
    """The object names mkdocstrings documented: the first field of each line of the site's Sphinx
    inventory (four header lines, then zlib)."""
    header_and_body = (site / "objects.inv").read_bytes().split(b"\n", 4)
    return {line.split(" ", 1)[0] for line in zlib.decompress(header_and_body[4]).decode().splitlines()}


def _public(module) -> dict[str, object]:
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return {n: getattr(module, n) for n in names if not inspect.ismodule(getattr(module, n))}


def test_the_site_builds_strictly_and_documents_every_public_name(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[docs]")')
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    documented = _inventory(site)
    # qfx and its public subpackages (qfx.diff, qfx.torch, and any added later).
    subpackages = [m for n, m in vars(qfx).items() if not n.startswith("_") and inspect.ismodule(m)]
    assert {qfx.diff, qfx.torch} <= set(subpackages)
    for module in [qfx, *subpackages]:
        prefix, objects = module.__name__, _public(module)
        # A name bound to a documented object (`qfx.H` is `qfx.Hadamard`) is documented with it.
        seen = {id(obj) for name, obj in objects.items() if f"{prefix}.{name}" in documented}
        missing = [
            n for n, obj in objects.items() if f"{prefix}.{n}" not in documented and id(obj) not in seen
        ]
        assert not missing, f"{prefix}: not in the API reference: {missing} (see the comment in mkdocs.yml)"
    for page in ["getting-started", *(p.stem for p in (_DOCS / "guides").glob("*.md"))]:
        assert list(site.rglob(f"{page}/index.html")), page


def test_the_reference_shows_the_signatures_equinox_generates():
    # docs/_griffe_equinox.py gives Equinox modules without an `__init__` of their own the one Equinox
    # generates; its parameters must be those of the runtime class.
    if importlib.util.find_spec("griffe") is None:
        pytest.skip('griffe is not installed (pip install -e ".[docs]")')
    import griffe  # noqa: PLC0415  (a docs dependency, not a test one)

    extension = griffe.load_extensions(str(_DOCS / "_griffe_equinox.py") + ":EquinoxModuleInit")
    package = griffe.load("qfx", search_paths=[str(_ROOT)], extensions=extension)
    checked = []
    for module in (qfx, qfx.diff):
        for name, obj in _public(module).items():
            if not inspect.isclass(obj) or name.startswith("Abstract"):
                continue
            path = f"{obj.__module__}.{obj.__qualname__}".removeprefix("qfx.")
            init = package[path].all_members.get("__init__")
            if init is None or not init.extra["equinox"].get("generated", False):
                continue
            expected = list(inspect.signature(obj).parameters)
            assert [p.name for p in init.parameters][1:] == expected, name
            checked.append(name)
    assert {"StateVector", "ParameterShift", "Cond"} <= set(checked)
