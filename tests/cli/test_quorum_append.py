"""``kraft quorum append`` against three real ``kraft node`` processes: the values commit as
one batch through the leader whichever node is asked first, every node commits them, and
``kraft log dump --records`` shows them; an unreachable quorum is an error, not a hang; an
answer that appended nothing is sent again, an unknown outcome never."""

from __future__ import annotations

import json

import pytest

from kraft.cli import quorum as quorum_cli
from kraft.cli.main import main
from kraft.config import Endpoint
from kraft.errors import KraftError, OperationTimeoutError, TransportError
from kraft.protocol.errors import Errors
from kraft.protocol.messages import ForwardAppendRequest, ForwardAppendResponse
from kraft.runtime.processes import LocalQuorum, free_ports

TIMEOUT_S = 60.0


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.slow
def test_append_through_a_follower_commits_everywhere_and_log_dump_shows_it(
    quorum: LocalQuorum, capsys: pytest.CaptureFixture[str]
) -> None:
    leader = quorum.leader(TIMEOUT_S)
    follower = next(n for n in quorum.nodes if n != leader)
    # A follower first: it names the leader, which takes the batch.
    bootstrap = ",".join([quorum.addresses[follower], quorum.bootstrap])
    code, out, err = run(
        capsys, "quorum", "append", "-b", bootstrap, "--value", "hello", "--value", "wörld",
        "--json", "--timeout", str(TIMEOUT_S),
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["leader_id"] == leader
    assert result["last_offset"] == result["base_offset"] + 1
    for node_id in quorum.nodes:
        event = quorum.wait_committed(node_id, result["last_offset"], TIMEOUT_S)
        assert event["records"] == ["hello", "wörld"]
        assert event["offset"] == result["last_offset"]

    code, out, err = run(
        capsys, "quorum", "append", "-b", quorum.bootstrap, "--value", "again",
        "--timeout", str(TIMEOUT_S),
    )  # fmt: skip
    assert code == 0, err
    again = result["last_offset"] + 1
    assert out.startswith(f"Appended 1 record(s) at offsets {again}..{again} (leader {leader}")
    quorum.wait_committed(follower, again, TIMEOUT_S)

    code, out, err = run(capsys, "log", "dump", str(quorum.root / f"node-{follower}"), "--records")
    assert code == 0, err
    values = [line.split(" value: ")[1] for line in out.splitlines() if " value: " in line]
    data = [v for v in values if "control:" not in v]
    assert data == ["b'hello'", repr("wörld".encode()), "b'again'"]


def test_no_quorum_to_ask_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)
    code, _, err = run(
        capsys, "quorum", "append", "-b", f"127.0.0.1:{port}", "--value", "x", "--timeout", "1"
    )
    assert code == 1
    assert "error: no leader answered" in err and "gave up after 1 s" in err


def test_a_value_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "quorum", "append", "-b", "127.0.0.1:1")[0] == 2


# -- append_values' answers, on a stand-in leader ----------------------------------------------

LEADER = Endpoint("127.0.0.1", 9093)


def stand_in(
    monkeypatch: pytest.MonkeyPatch, answers: list[ForwardAppendResponse | TransportError]
) -> list[ForwardAppendRequest]:
    """The leader is always found at LEADER; each ForwardAppend takes the next answer."""
    sent: list[ForwardAppendRequest] = []

    def find_leader(*args: object, **kwargs: object) -> tuple[Endpoint, None]:
        return LEADER, None

    def request_once(address: Endpoint, body: ForwardAppendRequest, **kwargs: object) -> object:
        assert address == LEADER
        sent.append(body)
        answer = answers.pop(0)
        if isinstance(answer, TransportError):
            raise answer
        return answer

    monkeypatch.setattr(quorum_cli, "find_leader", find_leader)
    monkeypatch.setattr(quorum_cli, "request_once", request_once)
    monkeypatch.setattr(quorum_cli, "_RETRY_BACKOFF_S", 0.0)
    return sent


def test_an_answer_that_appended_nothing_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = stand_in(
        monkeypatch,
        [
            ForwardAppendResponse(error_code=Errors.NOT_LEADER_OR_FOLLOWER, leader_id=2),
            ForwardAppendResponse(error_code=Errors.NOT_LEADER_OR_FOLLOWER, leader_id=-1),
            ForwardAppendResponse(leader_id=2, leader_epoch=4, last_offset=11, batch_epoch=4),
        ],
    )
    result = quorum_cli.append_values([LEADER], [b"a", b"b"], timeout_s=10)
    assert result == quorum_cli.AppendResult(10, 11, 4, 2)
    assert len(sent) == 3 and all(body.records == (b"a", b"b") for body in sent)


@pytest.mark.parametrize(
    "answer",
    [
        ForwardAppendResponse(error_code=Errors.REQUEST_TIMED_OUT, error_message="slow"),
        TransportError("127.0.0.1:9093: the connection closed"),
    ],
)
def test_an_unknown_outcome_is_not_sent_again(
    monkeypatch: pytest.MonkeyPatch, answer: ForwardAppendResponse | TransportError
) -> None:
    sent = stand_in(monkeypatch, [answer])
    with pytest.raises(OperationTimeoutError, match="may or may not have committed"):
        quorum_cli.append_values([LEADER], [b"a"], timeout_s=10)
    assert len(sent) == 1


def test_a_refused_batch_names_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = ForwardAppendResponse(error_code=Errors.INVALID_RECORD, error_message="cannot decode")
    sent = stand_in(monkeypatch, [refused])
    with pytest.raises(KraftError, match="INVALID_RECORD: cannot decode"):
        quorum_cli.append_values([LEADER], [b"a"], timeout_s=10)
    assert len(sent) == 1
