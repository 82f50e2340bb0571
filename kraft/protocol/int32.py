"""The int32 range of epochs and replica ids, checked on messages that skipped the wire codec.

Kafka's epochs and replica ids are ``int32`` fields of the wire schema, so a message decoded
from bytes cannot carry anything else. In-process transports (the simulator, tests) hand the
Raft core message objects directly; :func:`int32_fields_in_range` lets the core refuse one
carrying an out-of-range epoch or id before it can reach the persisted quorum state.

The check is planned once per message type (which fields are epochs, ids, or may nest
structs) and then costs a few ``getattr`` calls per message.
"""

from __future__ import annotations

import types
import typing
import uuid

from kraft.common.limits import INT32_MAX, INT32_MIN

__all__ = ["int32_fields_in_range"]

_SCALARS = (int, str, bytes, bool, float, type(None))
_DECLARED_SCALARS = (*_SCALARS, uuid.UUID)
_Plan = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
#: Per message type: its epoch fields, its id fields and the fields that may nest structs.
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    names: tuple[str, ...] = getattr(cls, "__struct_fields__", ())
    epochs = tuple(n for n in names if n.endswith("epoch"))
    ids = tuple(n for n in names if n.endswith("_id") and not n.endswith("epoch"))
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        hints = {}
    # A field declared as a scalar (an int, a string, bytes, a UUID) nests no struct: it is
    # not looked at (every response is checked, and these are most of a message's fields).
    others = tuple(
        n
        for n in names
        if n not in epochs and n not in ids and (n not in hints or _may_nest(hints[n]))
    )
    plan = _PLANS[cls] = (epochs, ids, others)
    return plan


def _may_nest(hint: object) -> bool:
    """Whether a field of type ``hint`` may hold a struct (or a tuple of them)."""
    if hint in _DECLARED_SCALARS:
        return False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_may_nest(arg) for arg in typing.get_args(hint))
    return True


def int32_fields_in_range(message: object) -> bool:
    """Whether every epoch and id of ``message`` (and of the structs it nests) is an int32.

    An epoch must also leave room for one more election: it must be below ``INT32_MAX``.
    """
    cls = type(message)
    epochs, ids, others = _PLANS.get(cls) or _plan(cls)
    for name in epochs:
        value = getattr(message, name)
        if type(value) is int and not INT32_MIN <= value < INT32_MAX:
            return False
    for name in ids:
        value = getattr(message, name)
        if type(value) is int and not INT32_MIN <= value <= INT32_MAX:
            return False
    for name in others:
        value = getattr(message, name)
        if type(value) in _SCALARS:
            continue
        if type(value) is tuple:
            if not all(int32_fields_in_range(item) for item in value):
                return False
        elif hasattr(value, "__struct_fields__") and not int32_fields_in_range(value):
            return False
    return True
