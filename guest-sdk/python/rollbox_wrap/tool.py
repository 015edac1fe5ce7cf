"""A plain typed Python function as the `tool` world.

`rollbox build tool FILE.py:FUNCTION` generates the component's app module:

    from rollbox_wrap.tool import world
    WitWorld = world("my_tools", "search", ())

The tool's schema comes from the function at build: its docstring's first paragraph is the
description, each parameter's type hint its JSON type (`str`, `int`, `float`, `bool`, `list`,
`dict`, `list[...]`, `X | None`, `Optional[X]`, `Literal[...]`), a parameter without a default
is required, and a Google-style `Args:` section gives the parameters' descriptions (verl's
`@function_tool` and TRL's tools derive theirs the same way). A call passes the JSON arguments
as keywords; a string result is the output as it is, anything else its JSON.
"""

import inspect
import json
import types
import typing

import wit_world
from componentize_py_types import Err

from rollbox_wrap import sandbox

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean",
            list: "array", tuple: "array", dict: "object"}


def json_type(hint):
    """The JSON schema of a type hint (`{}`: any value)."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return json_type(rest[0]) if len(rest) == 1 else {"anyOf": [json_type(a) for a in rest]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        schema = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = json_type(args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    raise ValueError(f"no JSON type for the hint {hint!r}; use str, int, float, bool, list or dict")


def _doc_parts(doc):
    """The description (the first paragraph) and the `Args:` section's descriptions."""
    doc = inspect.cleandoc(doc or "")
    description = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    args, current, in_args = {}, None, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                continue
            if not line.startswith((" ", "\t")):  # the next section
                break
            head, sep, text = stripped.partition(":")
            name = head.split("(")[0].strip()
            if sep and name.isidentifier() and line.startswith(("    ", "\t")) and \
                    len(line) - len(line.lstrip()) <= 4:
                current = name
                args[name] = text.strip()
            elif current:
                args[current] = (args[current] + " " + stripped).strip()
    return description, args


def schema(fn):
    """The tool's `{"description", "parameters"}` from `fn`'s signature and docstring."""
    description, arg_docs = _doc_parts(fn.__doc__)
    if not description:
        raise ValueError(f"`{fn.__name__}` has no docstring: its first paragraph is the "
                         "description the model reads")
    hints = typing.get_type_hints(fn)
    properties, required = {}, []
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = json_type(hints.get(name, p.annotation))
        if name in arg_docs:
            prop["description"] = arg_docs[name]
        properties[name] = prop
        if p.default is p.empty:
            required.append(name)
    return {"description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}


def world(module: str, function: str, preimport=()):
    """The `WitWorld` class calling `module.function` as a tool."""
    fn = getattr(sandbox.load(module), function, None)
    if not callable(fn):
        raise ValueError(f"{module}.py has no function `{function}`")
    described = json.dumps(schema(fn))
    sandbox.seal(preimport)

    class WitWorld(wit_world.WitWorld):
        def describe(self) -> str:
            return described

        def call(self, name: str, args: str) -> str:
            with sandbox.calling() as c:
                text, failure = None, None
                try:
                    kwargs = json.loads(args) if args.strip() else {}
                    if not isinstance(kwargs, dict):
                        raise Err("the arguments are not a JSON object")
                    out = fn(**kwargs)
                    text = out if isinstance(out, str) else json.dumps(out)
                except Err as e:
                    failure = e
                except BaseException as e:  # SystemExit too: a call's end is a result
                    failure = Err(f"{function} raised {type(e).__name__}: {str(e)[:2000]}")
            if c.violations:
                raise Err(f"{function} needed what the sandbox lacks: " + "; ".join(c.violations)
                          + (f" (then: {failure.value})" if failure is not None else ""))
            if failure is not None:
                raise failure
            return text

    return WitWorld
