"""Kafka's error codes and the protocol exceptions that carry them.

:class:`Errors` is Kafka's ``clients/src/main/java/org/apache/kafka/common/protocol/Errors.java``
with its real numbers: the whole table (-1 to 128, as of Kafka trunk in Oct 2024), because a
peer may answer with any of them and an error code on the wire must never be unreadable.

The exception tree follows h2: every :class:`ProtocolError` subclass carries its wire code as
``error_code``, so that a handler can raise and the layer that builds the response can turn the
exception back into a code (:func:`code_for_exception`), and a response's code can be raised as
the matching exception (:func:`exception_for_code`). Codes the Raft core answers or acts upon
have their own class; any other code maps to a plain :class:`ProtocolError` holding that code.
Which code answers which condition follows Kafka's ``KafkaRaftClient`` (its ``handle*Request``
methods); docs/protocol.md lists them.
"""

from __future__ import annotations

import enum

from kraft.errors import KraftError

__all__ = [
    "BrokerNotAvailableError",
    "ClusterAuthorizationFailedError",
    "CorruptMessageError",
    "DuplicateVoterError",
    "Errors",
    "FencedLeaderEpochError",
    "FrameError",
    "FrameBudgetExceededError",
    "FrameTooLargeError",
    "InconsistentClusterIdError",
    "InconsistentVoterSetError",
    "InvalidRequestError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaStorageError",
    "MalformedFrameError",
    "MessageEncodeError",
    "NetworkError",
    "NotControllerError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "PositionOutOfRangeError",
    "ProtocolError",
    "RecordListTooLargeError",
    "RequestTimedOutError",
    "SnapshotNotFoundError",
    "UnknownLeaderEpochError",
    "UnknownServerError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
    "code_for_exception",
    "error_name",
    "exception_for_code",
]


class Errors(enum.IntEnum):
    """Kafka's error codes, with the numbers of Kafka's ``Errors.java``.

    Wire messages hold error codes as plain ``int`` (an ``IntEnum`` member is one), so that a
    code this table does not know still decodes; :meth:`from_code` reads such a code as
    ``UNKNOWN_SERVER_ERROR``, as Kafka's ``Errors.forCode`` does.
    """

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128

    @classmethod
    def from_code(cls, code: int) -> Errors:
        """The member for ``code``; ``UNKNOWN_SERVER_ERROR`` for a code this table lacks."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_SERVER_ERROR


class ProtocolError(KraftError):
    """An error with a Kafka error code: raised by a handler, or read from a response.

    ``error_code`` is a class attribute on the subclasses; a plain ``ProtocolError`` built by
    :func:`exception_for_code` for a code without its own class holds the code per instance.
    """

    error_code: Errors = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str | None = None, *, error_code: Errors | None = None) -> None:
        if error_code is not None:
            self.error_code = error_code
        super().__init__(message if message is not None else self.error_code.name)


class UnknownServerError(ProtocolError):
    """UNKNOWN_SERVER_ERROR (-1): an unexpected failure, or a code kraft does not know."""

    error_code = Errors.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(ProtocolError):
    """OFFSET_OUT_OF_RANGE (1): the offset is outside the log."""

    error_code = Errors.OFFSET_OUT_OF_RANGE


class CorruptMessageError(ProtocolError):
    """CORRUPT_MESSAGE (2): record bytes fail their CRC or do not parse."""

    error_code = Errors.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(ProtocolError):
    """UNKNOWN_TOPIC_OR_PARTITION (3): DescribeQuorum for a partition other than the metadata
    partition (``KafkaRaftClient.handleDescribeQuorumRequest``)."""

    error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(ProtocolError):
    """NOT_LEADER_OR_FOLLOWER (6): a leader-only request reached a replica that is not the
    leader, or a parked Fetch outlived the leadership."""

    error_code = Errors.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(ProtocolError):
    """REQUEST_TIMED_OUT (7): no response within ``request.timeout.ms``; also a voter change
    that cannot start or complete yet (KIP-853)."""

    error_code = Errors.REQUEST_TIMED_OUT


class BrokerNotAvailableError(ProtocolError):
    """BROKER_NOT_AVAILABLE (8): the leader is shutting down, or the peer is unreachable; the
    sender backs off and retries."""

    error_code = Errors.BROKER_NOT_AVAILABLE


class NetworkError(ProtocolError):
    """NETWORK_EXCEPTION (13): the connection broke before the response arrived."""

    error_code = Errors.NETWORK_EXCEPTION


class RecordListTooLargeError(ProtocolError):
    """RECORD_LIST_TOO_LARGE (18): a batch above the maximum batch size."""

    error_code = Errors.RECORD_LIST_TOO_LARGE


class NotEnoughReplicasError(ProtocolError):
    """NOT_ENOUGH_REPLICAS (19): fewer in-sync replicas than required."""

    error_code = Errors.NOT_ENOUGH_REPLICAS


class ClusterAuthorizationFailedError(ProtocolError):
    """CLUSTER_AUTHORIZATION_FAILED (31): fatal to the sender (as in Kafka's
    ``KafkaRaftClient``)."""

    error_code = Errors.CLUSTER_AUTHORIZATION_FAILED


class UnsupportedVersionError(ProtocolError):
    """UNSUPPORTED_VERSION (35): the peer does not speak this API version (a prospective replica
    that gets it on a pre-vote becomes a candidate at once, KIP-996)."""

    error_code = Errors.UNSUPPORTED_VERSION


class NotControllerError(ProtocolError):
    """NOT_CONTROLLER (41): a controller request reached a controller that is not active."""

    error_code = Errors.NOT_CONTROLLER


class InvalidRequestError(ProtocolError):
    """INVALID_REQUEST (42): the request breaks the protocol (wrong topic-partition, negative
    offset or epoch, last epoch above the request's epoch, ...)."""

    error_code = Errors.INVALID_REQUEST


class KafkaStorageError(ProtocolError):
    """KAFKA_STORAGE_ERROR (56): a disk error on the answering replica."""

    error_code = Errors.KAFKA_STORAGE_ERROR


class FencedLeaderEpochError(ProtocolError):
    """FENCED_LEADER_EPOCH (74): the request's epoch is below the receiver's."""

    error_code = Errors.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(ProtocolError):
    """UNKNOWN_LEADER_EPOCH (75): the request's epoch is above the leader's."""

    error_code = Errors.UNKNOWN_LEADER_EPOCH


class InconsistentVoterSetError(ProtocolError):
    """INCONSISTENT_VOTER_SET (94): historical (pre KIP-853); still readable from old peers."""

    error_code = Errors.INCONSISTENT_VOTER_SET


class InvalidUpdateVersionError(ProtocolError):
    """INVALID_UPDATE_VERSION (95): a feature-level update outside the supported range."""

    error_code = Errors.INVALID_UPDATE_VERSION


class SnapshotNotFoundError(ProtocolError):
    """SNAPSHOT_NOT_FOUND (98): no snapshot with the requested id (or the bootstrap id)."""

    error_code = Errors.SNAPSHOT_NOT_FOUND


class PositionOutOfRangeError(ProtocolError):
    """POSITION_OUT_OF_RANGE (99): a FetchSnapshot position outside ``[0, size)``."""

    error_code = Errors.POSITION_OUT_OF_RANGE


class UnknownTopicIdError(ProtocolError):
    """UNKNOWN_TOPIC_ID (100): a topic id the receiver does not know."""

    error_code = Errors.UNKNOWN_TOPIC_ID


class InconsistentClusterIdError(ProtocolError):
    """INCONSISTENT_CLUSTER_ID (104): the request names another cluster; it changes nothing."""

    error_code = Errors.INCONSISTENT_CLUSTER_ID


class InvalidVoterKeyError(ProtocolError):
    """INVALID_VOTER_KEY (125): the request's voter id / directory id is not the receiver."""

    error_code = Errors.INVALID_VOTER_KEY


class DuplicateVoterError(ProtocolError):
    """DUPLICATE_VOTER (126): AddRaftVoter for a replica already in the voter set."""

    error_code = Errors.DUPLICATE_VOTER


class VoterNotFoundError(ProtocolError):
    """VOTER_NOT_FOUND (127): Remove/UpdateRaftVoter for a replica not in the voter set."""

    error_code = Errors.VOTER_NOT_FOUND


class FrameError(ProtocolError):
    """Bytes on a connection that are not a kraft frame; the connection cannot go on.

    Answered, where an answer is possible at all, as INVALID_REQUEST; the runtime closes the
    connection and logs the error. Not the canonical exception of any code.
    """

    error_code = Errors.INVALID_REQUEST


class FrameTooLargeError(FrameError):
    """A frame's declared length is above the configured maximum (raised before its body is
    read), or a frame being encoded would be."""

    def __init__(self, size: int, max_frame_size: int) -> None:
        super().__init__(f"frame of {size} bytes is above the maximum of {max_frame_size} bytes")
        self.size = size
        self.max_frame_size = max_frame_size


class FrameBudgetExceededError(FrameError):
    """A partially received frame needs more bytes than its decoder's shared budget has left
    (Kafka's ``queued.max.request.bytes``): the connection holding it is closed."""

    def __init__(self, held: int, budget_limit: int) -> None:
        super().__init__(
            f"a partial frame of {held} bytes does not fit in the budget of {budget_limit} "
            "bytes for partially received frames"
        )
        self.held = held
        self.budget_limit = budget_limit


class MalformedFrameError(FrameError):
    """A frame's body is not a well-formed message: bad msgpack, wrong types, an unknown API
    key, or a header that disagrees with its body; or the stream ended inside a frame."""


class MessageEncodeError(FrameError):
    """A message that cannot be encoded (a field of a type msgspec cannot write, or an integer
    out of the 64-bit range): a bug in the sender, caught before any byte is sent."""


_CANONICAL: tuple[type[ProtocolError], ...] = (
    UnknownServerError,
    OffsetOutOfRangeError,
    CorruptMessageError,
    UnknownTopicOrPartitionError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    BrokerNotAvailableError,
    NetworkError,
    RecordListTooLargeError,
    NotEnoughReplicasError,
    ClusterAuthorizationFailedError,
    UnsupportedVersionError,
    NotControllerError,
    InvalidRequestError,
    KafkaStorageError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    InconsistentVoterSetError,
    InvalidUpdateVersionError,
    SnapshotNotFoundError,
    PositionOutOfRangeError,
    UnknownTopicIdError,
    InconsistentClusterIdError,
    InvalidVoterKeyError,
    DuplicateVoterError,
    VoterNotFoundError,
)

#: One class per code (tests/protocol checks that no two classes claim the same code).
_CLASS_FOR_CODE: dict[Errors, type[ProtocolError]] = {cls.error_code: cls for cls in _CANONICAL}


def error_name(code: int) -> str:
    """How logs and messages name an error code read from the wire: Kafka's name for it, or
    ``unknown error code N`` for one Kafka's table lacks (kept as sent, not read as
    ``UNKNOWN_SERVER_ERROR``, so that a log shows what the peer said)."""
    try:
        return Errors(code).name
    except ValueError:
        return f"unknown error code {code}"


def exception_for_code(code: int, message: str | None = None) -> ProtocolError:
    """The exception for a non-zero error code read from the wire (not raised: returned).

    A code with its own class gives that class; a known code without one gives a plain
    :class:`ProtocolError` holding the code; a code Kafka's table lacks gives
    :class:`UnknownServerError`, as Kafka's ``Errors.forCode`` does. ``NONE`` is not an error:
    ``ValueError``.
    """
    if code == Errors.NONE:
        raise ValueError("error code 0 (NONE) is not an error")
    error = Errors.from_code(code)
    if error is Errors.UNKNOWN_SERVER_ERROR and code != Errors.UNKNOWN_SERVER_ERROR:
        return UnknownServerError(message if message is not None else error_name(code))
    cls = _CLASS_FOR_CODE.get(error)
    if cls is None:
        return ProtocolError(message, error_code=error)
    return cls(message)


def code_for_exception(exc: BaseException) -> Errors:
    """The error code that answers ``exc``: its ``error_code`` for any kraft error, else
    ``UNKNOWN_SERVER_ERROR`` (Kafka's ``Errors.forException`` does the same)."""
    if isinstance(exc, KraftError):
        return Errors.from_code(exc.error_code)
    return Errors.UNKNOWN_SERVER_ERROR
