"""The exception a controller operation's future fails with when this node cannot serve it.

Operations that refuse their input fail with
:class:`~kraft.controller.result.ControllerApiError` and the Kafka code of the refusal;
:class:`NotControllerError` is the one every operation can meet: the node is not (or no longer)
the active controller, so the caller should ask the node the Raft client names as leader.
"""

from __future__ import annotations

from kraft.controller.result import ControllerApiError
from kraft.protocol.errors import Errors

__all__ = ["NotControllerError"]


class NotControllerError(ControllerApiError):
    """NOT_CONTROLLER; ``leader_id`` is the node the Raft client last named as leader, if
    any: the active controller, or about to be."""

    def __init__(self, leader_id: int | None) -> None:
        hint = "no leader is known" if leader_id is None else f"the leader is node {leader_id}"
        super().__init__(Errors.NOT_CONTROLLER, f"not the active controller; {hint}")
        self.leader_id = leader_id
