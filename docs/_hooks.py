"""MkDocs hooks for qfx's site (listed under `hooks:` in mkdocs.yml).

`docs/api/others.md` holds the marker `<!-- qfx:unlisted -->`, replaced at build time by a `::: qfx.Name`
block for each public name of `qfx` (and of its public subpackages, such as `qfx.diff`) that no page under
`docs/api/` names, so that a new export appears in the reference (and is checked by
`mkdocs build --strict`) before someone gives it a topic page. Griffe, which mkdocstrings uses, treats
`from ._x import Y as Y` re-exports as private in a module without an `__all__`, so `::: qfx` alone would
render none of them; a subpackage with an `__all__` can instead be rendered whole by one `::: qfx.name`
block, as docs/api/torch.md renders `qfx.torch`.
"""

import importlib
import inspect
import pathlib
import re
import sys

MARKER = "<!-- qfx:unlisted -->"


def public_names(module) -> list[str]:
    """The names a user reaches as `module.Name`: those not starting with `_`, submodules excluded."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not inspect.ismodule(getattr(module, n))]


def namespaces(qfx) -> list:
    """`qfx` and its public subpackages that `import qfx` loads (`qfx.diff`; not `qfx.torch`)."""
    return [qfx] + [m for n, m in vars(qfx).items() if not n.startswith("_") and inspect.ismodule(m)]


def blocks(api_dir: pathlib.Path) -> set[str]:
    """The identifiers of the `::: identifier` blocks of the pages under `api_dir`."""
    pattern = re.compile(r"^::: ([\w.]+)\s*$", re.M)
    return {m for page in api_dir.glob("*.md") for m in pattern.findall(page.read_text())}


def unlisted(root: pathlib.Path) -> list[str]:
    """`module.Name` for each public name documented on no API page. A name bound to the same object as a
    documented one (`qfx.H` is `qfx.Hadamard`) counts as documented, and so does every name of a module
    with an `__all__` that a page renders whole."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    done = blocks(root / "docs" / "api")
    out = []
    for module in namespaces(importlib.import_module("qfx")):
        prefix = module.__name__
        if hasattr(module, "__all__") and prefix in done:
            continue
        names = public_names(module)
        documented = {id(getattr(module, n)) for n in names if f"{prefix}.{n}" in done}
        out += [
            f"{prefix}.{n}"
            for n in names
            if f"{prefix}.{n}" not in done and id(getattr(module, n)) not in documented
        ]
    return out


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    root = pathlib.Path(config["config_file_path"]).parent
    names = unlisted(root)
    if not names:
        return markdown.replace(MARKER, "None at present: every public name has its place on a page above.")
    return markdown.replace(MARKER, "\n\n".join(f"::: {n}" for n in names))
