"""``@record``: a frozen dataclass that is cheaper to build and to keep.

A snapshot builds thousands of records every tick (one per container, accelerator, process,
CPU and memory figure, …) and frees the previous snapshot's. So a record is a frozen dataclass
with ``__slots__``: no per-instance ``__dict__``, less memory to allocate and free. And since
a frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``
(the frozen ``__setattr__`` refuses), ``record`` replaces it with one of the same signature
that sets each field through its slot directly. Everything else is the
dataclass's own: fields, ``replace``, equality, hashing, ``repr``, and ``FrozenInstanceError``
on assignment.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_NO_VALUE = object()      # stands for "not passed" where a field's default is a factory


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True, slots=True)`` with a cheaper ``__init__`` (same signature,
    same result); type checkers see the dataclass (``dataclass_transform``)."""
    # type[Any]: mypy refuses assigning a method on a known class, which is the point here.
    built: type[Any] = dataclasses.dataclass(frozen=True, slots=True)(cls)
    built.__init__ = _direct_init(built)
    return built


def _direct_init(cls: type[Any]) -> Any:
    env: dict[str, Any] = {"__record_no_value": _NO_VALUE}
    positional: list[str] = []
    keyword_only: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        env[f"__record_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.name == "self" or f.name.startswith("__record_"):    # names the code uses
            raise TypeError(f"{cls.__qualname__}.{f.name}: a name @record keeps for itself")
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if not f.init:
            if has_default:
                env[f"__record_default_{f.name}"] = f.default
                body.append(f"__record_set_{f.name}(self, __record_default_{f.name})")
            elif has_factory:
                env[f"__record_factory_{f.name}"] = f.default_factory
                body.append(f"__record_set_{f.name}(self, __record_factory_{f.name}())")
            continue
        if has_default:
            env[f"__record_default_{f.name}"] = f.default
            parameter = f"{f.name}=__record_default_{f.name}"
        elif has_factory:
            env[f"__record_factory_{f.name}"] = f.default_factory
            parameter = f"{f.name}=__record_no_value"
            body.append(f"if {f.name} is __record_no_value: "
                        f"{f.name} = __record_factory_{f.name}()")
        else:
            parameter = f.name
        (keyword_only if f.kw_only else positional).append(parameter)
        body.append(f"__record_set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    parameters = ", ".join(["self", *positional, *(["*", *keyword_only] if keyword_only else [])])
    source = (f"def __init__({parameters}):\n"
              + "".join(f"    {line}\n" for line in body or ["pass"]))
    exec(source, env)   # nosec B102: built from the class's own field names (identifiers)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    if _shape(init) != _shape(cls.__init__):     # e.g. an InitVar, which fields() leaves out
        raise TypeError(f"@record cannot rebuild {cls.__qualname__}.__init__")
    return init


def _shape(init: Any) -> list[tuple[str, Any, bool]]:
    return [(p.name, p.kind, p.default is inspect.Parameter.empty)
            for p in inspect.signature(init).parameters.values()]
