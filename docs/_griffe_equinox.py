"""A griffe extension (mkdocstrings reads qfx's source with griffe) that gives Equinox modules without an
`__init__` of their own the signature Equinox generates for them, so that the API reference shows
`qfx.StateVector(mcm=None)` rather than no signature. Equinox builds that `__init__` from the annotated
fields, the base classes' first, as dataclasses do; fields declared with `eqx.field(init=False)`, class
variables and abstract variables are not parameters. Listed under `extensions:` in mkdocs.yml.
"""

import griffe

_MODULE = {"equinox.Module", "equinox._module.Module", "equinox._module._module.Module"}
_FIELD = {"equinox.field", "equinox._module.field"}
_ABSTRACT = {"equinox.AbstractVar", "equinox.AbstractClassVar"}


def _path(expr) -> str:
    return expr.canonical_path if isinstance(expr, griffe.Expr) else str(expr)


def _parents(cls: griffe.Class) -> list[griffe.Class]:
    """The classes `cls` inherits from that griffe loaded (qfx's own), nearest first; [] if unresolved."""
    try:
        return list(cls.mro())
    except ValueError:
        return []


def _is_equinox_module(cls: griffe.Class) -> bool:
    return any(_path(base) in _MODULE for c in [cls, *_parents(cls)] for base in c.bases)


def _call_keywords(value) -> dict | None:
    """The keyword arguments of `eqx.field(...)` (a dict of name -> expression), or None for other values."""
    if isinstance(value, griffe.ExprCall) and _path(value.function) in _FIELD:
        return {a.name: a.value for a in value.arguments if isinstance(a, griffe.ExprKeyword)}
    return None


def _fields(cls: griffe.Class) -> list[griffe.Parameter]:
    params = []
    for member in cls.members.values():
        if member.is_alias or not member.is_attribute or member.annotation is None:
            continue
        if "instance-attribute" not in member.labels and "class-attribute" in member.labels:
            continue  # a ClassVar
        if "property" in member.labels or _path(member.annotation) in _ABSTRACT:
            continue
        if isinstance(member.annotation, griffe.ExprSubscript) and _path(member.annotation.left) in _ABSTRACT:
            continue
        keywords = _call_keywords(member.value)
        if keywords is not None and str(keywords.get("init", "True")) == "False":
            continue
        default = member.value if keywords is None else keywords.get("default")
        params.append(
            griffe.Parameter(
                member.name,
                annotation=member.annotation,
                kind=griffe.ParameterKind.positional_or_keyword,
                default=default,
            )
        )
    return params


def _defines_init(cls: griffe.Class) -> bool:
    init = cls.members.get("__init__")
    return init is not None and not init.extra["equinox"].get("generated", False)


def _add_init(cls: griffe.Class) -> None:
    if cls.name.startswith("Abstract") or not _is_equinox_module(cls):
        return  # qfx's abstract classes are never instantiated: no signature
    if any(_defines_init(c) for c in [cls, *_parents(cls)]):
        return
    fields = {}
    for c in [*reversed(_parents(cls)), cls]:  # bases first; a redeclared field keeps its first place
        for param in _fields(c):
            fields[param.name] = param
    self = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
    init = griffe.Function("__init__", parent=cls, parameters=griffe.Parameters(self, *fields.values()))
    init.extra["equinox"]["generated"] = True  # a subclass's own fields still count (see _defines_init)
    cls.set_member("__init__", init)


def _walk(obj, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    for member in list(obj.members.values()):
        if member.is_alias:
            continue
        if member.is_class:
            _add_init(member)
        if member.is_module or member.is_class:
            _walk(member, seen)


class EquinoxModuleInit(griffe.Extension):
    """Adds the generated `__init__` to Equinox modules that do not define one."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        _walk(pkg, set())
