"""Kafka's topic name rules (``org.apache.kafka.common.internals.Topic``)."""

from __future__ import annotations

__all__ = ["has_collision_chars", "topic_name_error", "unify_collision_chars"]

_MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid topic name (Kafka's ``Topic.validate``), ``None`` if it is."""
    if not name:
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > _MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
            f"length {_MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_TOPIC_CHARS.issuperset(name):
        return (
            f"Topic name is invalid: '{name}' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def has_collision_chars(name: str) -> bool:
    """Whether ``name`` holds '.' or '_', which metric names do not tell apart."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """``name`` with '.' as '_': two names equal this way would collide in metric names."""
    return name.replace(".", "_")
