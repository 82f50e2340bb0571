"""What a control manager's operation returns: the records to append and the response to give
once they commit (Kafka's ``ControllerResult``), and the error of one item of a response
(Kafka's ``ApiError``).

An operation never changes the manager's state: the controller appends the records, replays them
into the managers at their offsets, and answers with ``response`` when the last one commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from kraft.errors import KraftError
from kraft.metadata.records import ApiMessageAndVersion
from kraft.protocol.errors import Errors, ProtocolError

__all__ = ["ApiError", "ControllerApiError", "ControllerResult"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error code and its message, as a response carries them (Kafka's ``ApiError``)."""

    error: Errors
    message: str | None = None

    NONE: ClassVar[ApiError]

    def is_success(self) -> bool:
        return self.error is Errors.NONE

    def message_or_default(self) -> str | None:
        """The message, else the code's name for a failure (Kafka's ``messageWithFallback``),
        ``None`` for success."""
        if self.message is not None or self.is_success():
            return self.message
        return self.error.name

    def exception(self) -> ControllerApiError:
        return ControllerApiError(self.error, self.message)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ApiError:
        """The error an exception stands for (Kafka's ``ApiError.fromThrowable``): its own code
        for a controller or protocol error, UNKNOWN_SERVER_ERROR for anything else."""
        if isinstance(exc, ControllerApiError):
            return exc.api_error
        if isinstance(exc, ProtocolError):
            return cls(Errors.from_code(int(exc.error_code)), str(exc) or None)
        return cls(Errors.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


ApiError.NONE = ApiError(Errors.NONE)


class ControllerApiError(KraftError):
    """A controller operation refused its input with a Kafka error code (STALE_BROKER_EPOCH,
    INVALID_REGISTRATION, ...); the controller answers the request with that code."""

    def __init__(self, error: Errors, message: str | None = None) -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error_code = int(error)
        self.api_error = ApiError(error, message)


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """The records an operation wants appended and the response it gives once they commit.

    ``is_atomic``: the records must go in one batch, all or none (Kafka's ``atomicOf``);
    otherwise the controller may split them over several batches.
    """

    records: list[ApiMessageAndVersion]
    response: R
    is_atomic: bool = False
