"""``@record``: frozen slotted dataclasses with a cheaper ``__init__`` that behaves as the
generated one."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pkgutil
from dataclasses import FrozenInstanceError, InitVar, field, replace

import pytest

import gpustats.model
from gpustats.model.record import record


def _plain_twin(cls):
    """The same fields under the stock ``@dataclass(frozen=True)``."""
    namespace = {"__annotations__": dict(cls.__annotations__), "__module__": cls.__module__}
    for f in dataclasses.fields(cls):
        namespace[f.name] = dataclasses.field(
            default=f.default, default_factory=f.default_factory, init=f.init, repr=f.repr,
            compare=f.compare, hash=f.hash, kw_only=f.kw_only)
    if hasattr(cls, "__post_init__"):
        namespace["__post_init__"] = cls.__post_init__
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), namespace))


def _model_records():
    for info in pkgutil.iter_modules(gpustats.model.__path__, "gpustats.model."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ \
                    and dataclasses.is_dataclass(value):
                yield value


MODEL_RECORDS = sorted(_model_records(), key=lambda c: c.__qualname__)


def test_every_model_type_is_a_frozen_record():
    assert len(MODEL_RECORDS) > 30
    for cls in MODEL_RECORDS:
        assert cls.__dataclass_params__.frozen, cls
        assert "__slots__" in cls.__dict__, cls
        assert cls.__init__.__code__.co_filename == "<string>", cls
        assert any(name.startswith("__record_set_")       # fields set through their slots
                   for name in cls.__init__.__code__.co_names), cls


def _values(instance) -> dict:
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}


@pytest.mark.parametrize("cls", MODEL_RECORDS, ids=lambda c: c.__qualname__)
def test_same_signature_and_result_as_the_stock_dataclass(cls):
    twin = _plain_twin(cls)
    ours, stock = inspect.signature(cls.__init__), inspect.signature(twin.__init__)
    assert [(p.name, p.kind) for p in ours.parameters.values()] == \
        [(p.name, p.kind) for p in stock.parameters.values()]
    # Build both from the same arguments: each field's name stands for its value.
    required = {p.name: f"value of {p.name}" for p in ours.parameters.values()
                if p.name != "self" and p.default is inspect.Parameter.empty}
    if cls.__name__ == "CgroupRef":
        required = {"paths": (("memory", "/a"), ("", "/b"))}
    mine, theirs = cls(**required), twin(**required)
    assert _values(mine) == _values(theirs)
    assert not hasattr(mine, "__dict__")         # slots only: no per-instance dict


def test_defaults_factories_keyword_only_and_post_init():
    @record
    class Sample:
        a: float
        b: int | None = None
        tags: list = field(default_factory=list)
        d: int = field(default=3, kw_only=True)
        derived: dict = field(init=False, repr=False, compare=False)
        fixed: str = field(default="x", init=False)

        def __post_init__(self):
            object.__setattr__(self, "derived", {"a": self.a})

    one, two = Sample(1.0), Sample(1.0, 2, d=4)
    assert (one.a, one.b, one.tags, one.d, one.derived, one.fixed) == \
        (1.0, None, [], 3, {"a": 1.0}, "x")
    assert one.tags is not Sample(1.0).tags                  # a fresh default per instance
    assert (two.b, two.d) == (2, 4)
    assert Sample(1.0, 2, d=4) == two and hash(Sample(1.0, 2, [1], d=4).a) == hash(1.0)
    assert replace(two, b=5) == Sample(1.0, 5, d=4)
    with pytest.raises(TypeError):
        Sample(1.0, 2, [], 4)                                # d is keyword-only
    with pytest.raises(TypeError):
        Sample()                                             # a is required
    with pytest.raises(FrozenInstanceError):
        two.a = 2.0
    # No other attribute either (Python 3.11's frozen slotted dataclass says so with a
    # TypeError, later versions with FrozenInstanceError).
    with pytest.raises((FrozenInstanceError, AttributeError, TypeError)):
        two.undeclared = 1
    assert copy.copy(two) == two


def test_fields_it_cannot_rebuild_are_refused():
    with pytest.raises(TypeError):
        @record
        class WithInitVar:
            a: int
            scale: InitVar[int] = 1

    with pytest.raises(TypeError):
        @record
        class Shadowing:
            self: int
