"""The exceptions a controller operation's future fails with.

Kafka's controller answers a request that failed as a whole with an ``ApiException``, whose
error code goes back to the client; :class:`ControllerApiError` is kraft's, with the Kafka
error (:class:`~kraft.protocol.errors.Errors`) it stands for. Per-item failures inside a
successful answer (one topic of a CreateTopics, say) are values, not exceptions
(:class:`~kraft.controller.result.ApiError`).
"""

from __future__ import annotations

from kraft.errors import KraftError
from kraft.protocol.errors import Errors

__all__ = ["ControllerApiError", "NotControllerError"]


class ControllerApiError(KraftError):
    """An operation failed with Kafka error ``error`` (its code goes back to the client)."""

    def __init__(self, error: Errors, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error


class NotControllerError(ControllerApiError):
    """This node is not the active controller (NOT_CONTROLLER); ``leader_id`` is the node the
    Raft client last named as leader, if any: the active controller, or about to be."""

    def __init__(self, leader_id: int | None, message: str | None = None) -> None:
        hint = "no leader is known" if leader_id is None else f"the leader is node {leader_id}"
        super().__init__(Errors.NOT_CONTROLLER, message or f"not the active controller; {hint}")
        self.leader_id = leader_id
