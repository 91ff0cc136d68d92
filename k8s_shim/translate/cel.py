"""CEL device selectors of Dynamic Resource Allocation, evaluated with the
``common-expression-language`` library (a CEL implementation; none is written here).

A device is seen by an expression as kube-scheduler shows it: ``device.driver`` (string),
``device.attributes[domain][name]`` (int, bool, string, or a version as its string),
``device.capacity[domain][name]`` (a quantity), ``device.allowMultipleAllocations``. An attribute
or capacity named without a domain is in the driver's. Quantities are integers of milli-units
here, so ``quantity("1Gi")``, ``q.compareTo(other)``, ``q.isGreaterThan(other)``,
``q.isLessThan(other)``, ``q.asInteger()``, ``q.asApproximateFloat()`` and ``q.sign()`` behave as
Kubernetes' quantity library (and plain comparisons work too). Semantic-version methods are not
provided: an expression using them fails to evaluate, which the pod is told about.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import cel

from k8s_shim.translate import quantity as q

__all__ = ["CelError", "compile_selector", "device_context", "matches"]

_PARSE_PREFIX = re.compile(r"^Failed to parse expression '.*?': ", re.S)


class CelError(Exception):
    """An expression that does not compile, does not evaluate, or is not a bool."""


def _quantity(text: Any) -> int:
    try:
        return q.milli_value(str(text))
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"invalid quantity {text!r}: {exc}") from None


def _compare(a: int, b: int) -> int:
    return (a > b) - (a < b)


_FUNCTIONS = {
    "quantity": _quantity, "compareTo": _compare, "isGreaterThan": lambda a, b: a > b,
    "isLessThan": lambda a, b: a < b, "asInteger": lambda a: a // 1000,
    "asApproximateFloat": lambda a: a / 1000, "sign": lambda a: _compare(a, 0),
}


@lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Any:
    """The compiled program of ``expression``; ``CelError`` saying why it does not compile."""
    try:
        return cel.compile(expression)
    except (ValueError, RuntimeError) as exc:
        raise CelError("compilation failed: " + _PARSE_PREFIX.sub("", str(exc)).replace("\n| ", "\n | ")) from None


def _value(attribute: dict[str, Any]) -> Any:
    for key in ("string", "int", "bool", "version"):
        if key in attribute:
            return attribute[key]
    return None


def _qualified(driver: str, name: str) -> tuple[str, str]:
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


def device_context(driver: str, device: dict[str, Any]) -> Any:
    """The CEL context of one device of a ResourceSlice (``spec.devices[]``)."""
    attributes: dict[str, dict[str, Any]] = {driver: {}}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, short = _qualified(driver, name)
        attributes.setdefault(domain, {})[short] = _value(attribute or {})
    capacity: dict[str, dict[str, Any]] = {driver: {}}
    for name, cap in (device.get("capacity") or {}).items():
        domain, short = _qualified(driver, name)
        try:
            capacity.setdefault(domain, {})[short] = _quantity((cap or {}).get("value", "0"))
        except ValueError:
            continue  # a bad quantity: as if not published (the API server validates them)
    context = cel.Context()
    context.add_variable("device", {"driver": driver, "attributes": attributes, "capacity": capacity,
                                    "allowMultipleAllocations": bool(device.get("allowMultipleAllocations"))})
    for name, fn in _FUNCTIONS.items():
        context.add_function(name, fn)
    return context


def matches(expression: str, context: Any) -> bool:
    """Whether the device of ``context`` is selected; ``CelError`` if the expression cannot say."""
    program = compile_selector(expression)
    try:
        value = program.execute(context)
    except KeyError as exc:
        raise CelError(f"runtime error: no such key: {exc.args[0] if exc.args else ''}") from None
    except Exception as exc:  # the library raises ValueError, ZeroDivisionError, ... for runtime errors
        raise CelError(f"runtime error: {exc}") from None
    if not isinstance(value, bool):
        raise CelError(f"must evaluate to bool, not {type(value).__name__}")
    return value
