"""ApiError: the error an exception stands for, and back."""

from __future__ import annotations

import pytest

from kraft.controller.result import ApiError, ControllerApiError, ControllerResult
from kraft.protocol.errors import Errors, NotControllerError


def test_api_error_from_exceptions() -> None:
    stale = ControllerApiError(Errors.STALE_BROKER_EPOCH, "epoch 3, registered 5")
    assert ApiError.from_exception(stale) == ApiError(
        Errors.STALE_BROKER_EPOCH, "epoch 3, registered 5"
    )
    assert stale.error_code == Errors.STALE_BROKER_EPOCH
    assert ApiError.from_exception(NotControllerError("not active")).error is Errors.NOT_CONTROLLER
    unexpected = ApiError.from_exception(ValueError("boom"))
    assert unexpected == ApiError(Errors.UNKNOWN_SERVER_ERROR, "ValueError: boom")
    with pytest.raises(ControllerApiError) as raised:
        raise ApiError(Errors.INVALID_REQUEST, "bad").exception()
    assert raised.value.api_error == ApiError(Errors.INVALID_REQUEST, "bad")


def test_api_error_messages() -> None:
    assert ApiError.NONE.is_success() and ApiError.NONE.message_or_default() is None
    assert ApiError(Errors.POLICY_VIOLATION).message_or_default() == "POLICY_VIOLATION"
    assert not ApiError(Errors.POLICY_VIOLATION, "why").is_success()


def test_result_is_not_atomic_unless_asked() -> None:
    result: ControllerResult[int] = ControllerResult([], 7)
    assert (result.records, result.response, result.is_atomic) == ([], 7, False)
