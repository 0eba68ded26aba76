"""A class written in a notebook cell, as a module a server can load: its source, and the imports
and constants its methods name (``LabkitServer(connection_cache=MyCache)``).

The server runs in a process of its own, so it cannot use the notebook's class object: it loads
the class from a file (``labkit serve --connection-cache FILE.py:ClassName``). ``module_source``
writes that file's text: each global name the class's code reads, from the notebook's namespace,
as an import (a module, or a function or class of an importable module) or as its value (a
number, a string, a tuple of them...), then the class's own source.

    >>> import math
    >>> class Halves:
    ...     def half(self, x): return math.floor(x / 2)
    >>> print(module_source(Halves))
    from __future__ import annotations
    <BLANKLINE>
    import math
    <BLANKLINE>
    class Halves:
        def half(self, x): return math.floor(x / 2)
    <BLANKLINE>
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import textwrap
import types
from pathlib import Path
from typing import Any

LITERALS = (bool, int, float, complex, str, bytes, type(None))


class SourceError(RuntimeError):
    """The class's source cannot be found: one sentence."""


def class_source(cls: type) -> str:
    """The source of ``cls``, also for a class defined in a notebook cell (where
    ``inspect.getsource`` looks for a file the kernel's ``__main__`` does not have)."""
    try:
        return textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        pass
    for fn in _functions(cls):
        code = fn.__code__
        lines = linecache.getlines(code.co_filename)
        if not lines:
            continue
        tree = ast.parse("".join(lines))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                end = node.end_lineno or node.lineno
                if node.lineno <= code.co_firstlineno <= end:
                    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    return textwrap.dedent("".join(lines[start - 1 : end]))
    raise SourceError(
        f"the source of {cls.__name__} cannot be found: define it in a notebook cell or a .py file"
    )


def module_source(cls: type) -> str:
    """A module's text that defines ``cls`` as it was written, with what its code reads."""
    source = class_source(cls)
    spaces = _namespaces(cls)
    header: list[str] = []
    for name in sorted(_names(source) - {cls.__name__}):
        if hasattr(builtins, name) and not any(name in space for space in spaces):
            continue
        value = next((space[name] for space in spaces if name in space), _MISSING)
        if value is _MISSING:
            continue
        line = _definition(name, value)
        if line is not None:
            header.append(line)
    # Annotations stay text, as in the notebook they were written in (where any name may be used).
    future = "from __future__ import annotations\n\n"
    return future + "\n".join(header) + ("\n\n" if header else "") + source


_MISSING = object()


def _functions(cls: type) -> list[types.FunctionType]:
    found = []
    for value in vars(cls).values():
        fn = value.__func__ if isinstance(value, classmethod | staticmethod) else value
        fn = fn.fget if isinstance(fn, property) else fn
        if isinstance(fn, types.FunctionType):
            found.append(fn)
    return found


def _namespaces(cls: type) -> list[dict[str, Any]]:
    """Where the class's code finds its globals: its methods' module namespace."""
    spaces = [fn.__globals__ for fn in _functions(cls)]
    return spaces[:1] or [vars(inspect.getmodule(cls) or builtins)]


def _names(source: str) -> set[str]:
    """Every name the source reads (and the first part of every dotted name)."""
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


def _definition(name: str, value: Any) -> str | None:
    """``name`` as a line of the module: an import, or an assignment of a literal; None if neither."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
        if "." in module:
            parent, _, leaf = module.rpartition(".")
            return f"from {parent} import {leaf}" + ("" if leaf == name else f" as {name}")
        return f"import {module}" + ("" if module == name else f" as {name}")
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    importable = isinstance(module, str) and module != "builtins" and not module.startswith("__")
    if importable and isinstance(qualname, str) and "." not in qualname:
        return f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}")
    if _is_literal(value):
        return f"{name} = {value!r}"
    return None


def _is_literal(value: Any) -> bool:
    if isinstance(value, LITERALS):
        return True
    if isinstance(value, tuple | list | frozenset | set):
        return all(_is_literal(v) for v in value)
    if isinstance(value, dict):
        return all(_is_literal(k) and _is_literal(v) for k, v in value.items())
    return False


def write_module(cls: type, folder: Path) -> Path:
    """``cls``'s module, written into ``folder``: the file ``--connection-cache`` names."""
    path = Path(folder) / f"learner_{cls.__name__.lower()}.py"
    path.write_text(module_source(cls), encoding="utf-8")
    return path
