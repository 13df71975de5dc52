"""MkDocs hooks for qfx's site (listed under `hooks:` in mkdocs.yml).

`docs/api/others.md` holds the marker `<!-- qfx:unlisted -->`, replaced at build time by a `::: qfx.Name`
block for each public name of `qfx` and `qfx.diff` that no page under `docs/api/` names, so that a new
export appears in the reference (and is checked by `mkdocs build --strict`) before someone gives it a
topic page. (Griffe, which mkdocstrings uses, treats `from ._x import Y as Y` re-exports as private
without an `__all__`, so `::: qfx` alone would render none of them. `qfx.torch` has an `__all__` and its
page renders the module whole.)
"""

import importlib
import pathlib
import re
import sys

MARKER = "<!-- qfx:unlisted -->"


def public_names(module) -> list[str]:
    """The names a user reaches as `module.Name`: those not starting with `_`, submodules excluded."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not isinstance(getattr(module, n), type(sys))]


def listed(api_dir: pathlib.Path, prefix: str = "qfx") -> set[str]:
    """The names of `prefix` that a `::: prefix.Name` block of a page under `api_dir` documents."""
    pattern = re.compile(rf"^::: {re.escape(prefix)}\.(\w+)\s*$", re.M)
    return {m for page in api_dir.glob("*.md") for m in pattern.findall(page.read_text())}


NAMESPACES = ("qfx", "qfx.diff")


def unlisted(root: pathlib.Path) -> list[str]:
    """`module.Name` for each public name of the `NAMESPACES` documented on no API page; a name bound to
    the same object as a documented one (`qfx.H` is `qfx.Hadamard`) counts as documented."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    out = []
    for prefix in NAMESPACES:
        module = importlib.import_module(prefix)
        done = listed(root / "docs" / "api", prefix)
        documented = {id(getattr(module, n)) for n in done if hasattr(module, n)}
        names = public_names(module)
        out += [f"{prefix}.{n}" for n in names if n not in done and id(getattr(module, n)) not in documented]
    return out


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    root = pathlib.Path(config["config_file_path"]).parent
    names = unlisted(root)
    if not names:
        return markdown.replace(MARKER, "None at present: every public name has its place on a page above.")
    return markdown.replace(MARKER, "\n\n".join(f"::: {n}" for n in names))
