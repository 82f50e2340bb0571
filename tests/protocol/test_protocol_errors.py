"""Kafka's error codes have Kafka's numbers, and codes map to exceptions and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft.errors import CorruptRecordError, KraftError, RecordBatchTooLargeError
from kraft.protocol import (
    Errors,
    FencedLeaderEpochError,
    FrameTooLargeError,
    InconsistentClusterIdError,
    InvalidRequestError,
    MalformedFrameError,
    NotLeaderOrFollowerError,
    ProtocolError,
    UnknownServerError,
    code_for_exception,
    error_name,
    exception_for_code,
)
from kraft.protocol.errors import _CANONICAL

# Hand-checked against apache/kafka
# clients/src/main/java/org/apache/kafka/common/protocol/Errors.java (trunk, Oct 2024):
# every code KafkaRaftClient sends or handles, and the ones the KIP-853 voter RPCs use.
KAFKA_ERRORS_JAVA = {
    "UNKNOWN_SERVER_ERROR": -1,
    "NONE": 0,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "LEADER_NOT_AVAILABLE": 5,
    "NOT_LEADER_OR_FOLLOWER": 6,
    "REQUEST_TIMED_OUT": 7,
    "BROKER_NOT_AVAILABLE": 8,
    "NETWORK_EXCEPTION": 13,
    "RECORD_LIST_TOO_LARGE": 18,
    "NOT_ENOUGH_REPLICAS": 19,
    "CLUSTER_AUTHORIZATION_FAILED": 31,
    "UNSUPPORTED_VERSION": 35,
    "NOT_CONTROLLER": 41,
    "INVALID_REQUEST": 42,
    "KAFKA_STORAGE_ERROR": 56,
    "FENCED_LEADER_EPOCH": 74,
    "UNKNOWN_LEADER_EPOCH": 75,
    "INCONSISTENT_VOTER_SET": 94,
    "INVALID_UPDATE_VERSION": 95,
    "FEATURE_UPDATE_FAILED": 96,
    "SNAPSHOT_NOT_FOUND": 98,
    "POSITION_OUT_OF_RANGE": 99,
    "UNKNOWN_TOPIC_ID": 100,
    "INCONSISTENT_CLUSTER_ID": 104,
    "INVALID_VOTER_KEY": 125,
    "DUPLICATE_VOTER": 126,
    "VOTER_NOT_FOUND": 127,
}


@pytest.mark.parametrize(("name", "code"), sorted(KAFKA_ERRORS_JAVA.items()))
def test_error_numbers_are_kafkas(name: str, code: int) -> None:
    assert Errors[name] == code


def test_the_table_is_kafkas_whole_range() -> None:
    assert [e.value for e in Errors] == list(range(-1, 129))
    assert len({e.name for e in Errors}) == len(Errors)


def test_agrees_with_the_existing_kraft_errors() -> None:
    assert CorruptRecordError.error_code == Errors.CORRUPT_MESSAGE
    assert RecordBatchTooLargeError.error_code == Errors.RECORD_LIST_TOO_LARGE


def test_unknown_codes_read_as_unknown_server_error() -> None:
    assert Errors.from_code(129_999) is Errors.UNKNOWN_SERVER_ERROR
    assert Errors.from_code(74) is Errors.FENCED_LEADER_EPOCH
    exc = exception_for_code(31_000)
    assert isinstance(exc, UnknownServerError)
    assert "31000" in str(exc)


def test_one_class_per_code() -> None:
    codes = [cls.error_code for cls in _CANONICAL]
    assert len(codes) == len(set(codes))
    assert Errors.NONE not in codes


@pytest.mark.parametrize("error", [e for e in Errors if e is not Errors.NONE], ids=str)
def test_code_to_exception_and_back(error: Errors) -> None:
    exc = exception_for_code(error, "why")
    assert isinstance(exc, ProtocolError)
    assert isinstance(exc, KraftError)
    assert exc.error_code is error
    assert code_for_exception(exc) is error
    assert str(exc) == "why"


@pytest.mark.parametrize("cls", _CANONICAL, ids=lambda c: c.__name__)
def test_exception_to_code_and_back(cls: type[ProtocolError]) -> None:
    code = code_for_exception(cls())
    assert type(exception_for_code(code)) is cls
    assert str(cls()) == cls.error_code.name


@given(code=st.integers(-(2**15), 2**15 - 1).filter(lambda c: c != 0))
def test_any_int16_code_maps_to_an_exception_and_a_known_code(code: int) -> None:
    exc = exception_for_code(code)
    assert code_for_exception(exc) is Errors.from_code(code)


def test_specific_classes() -> None:
    assert type(exception_for_code(74)) is FencedLeaderEpochError
    assert type(exception_for_code(6)) is NotLeaderOrFollowerError
    assert type(exception_for_code(104)) is InconsistentClusterIdError
    generic = exception_for_code(Errors.LEADER_NOT_AVAILABLE)
    assert type(generic) is ProtocolError
    assert generic.error_code is Errors.LEADER_NOT_AVAILABLE
    assert ProtocolError.error_code is Errors.UNKNOWN_SERVER_ERROR  # the instance did not leak


def test_none_is_not_an_error() -> None:
    with pytest.raises(ValueError, match="NONE"):
        exception_for_code(Errors.NONE)


def test_foreign_and_plain_kraft_exceptions() -> None:
    assert code_for_exception(RuntimeError("boom")) is Errors.UNKNOWN_SERVER_ERROR
    assert code_for_exception(KraftError("plain")) is Errors.UNKNOWN_SERVER_ERROR
    assert code_for_exception(RecordBatchTooLargeError()) is Errors.RECORD_LIST_TOO_LARGE
    assert code_for_exception(MalformedFrameError("x")) is Errors.INVALID_REQUEST
    assert code_for_exception(FrameTooLargeError(10, 5)) is Errors.INVALID_REQUEST
    # A frame error is answered as INVALID_REQUEST, but INVALID_REQUEST reads back as the
    # canonical class.
    assert type(exception_for_code(Errors.INVALID_REQUEST)) is InvalidRequestError


def test_error_name_is_kafkas_name_or_the_unknown_code_as_sent() -> None:
    """A code from a newer peer is logged as it came, not as UNKNOWN_SERVER_ERROR."""
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(9999) == "unknown error code 9999"
    assert str(exception_for_code(9999)) == "unknown error code 9999"
