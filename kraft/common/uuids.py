"""Kafka's reserved UUIDs.

Kafka's ``Uuid.ZERO_UUID`` (all zero bits) means "none": a replica without a directory id, a
vote without a candidate directory.
"""

from __future__ import annotations

import uuid
from typing import Final

__all__ = ["ZERO_UUID"]

ZERO_UUID: Final = uuid.UUID(int=0)
