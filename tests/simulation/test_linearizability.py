"""The linearizability checker: hand-written histories whose verdict is known, and properties
over histories generated from a sequential execution."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.simulation.linearizability import Operation, OpKind, check_history, check_key


def put(key: str, value: str, start: int, end: int | None, client: int = 0) -> Operation:
    return Operation(
        client=client, op="put", key=key, value=value, invoke_ms=start, complete_ms=end
    )


def get(key: str, result: str | None, start: int, end: int | None, client: int = 0) -> Operation:
    return Operation(
        client=client, op="get", key=key, result=result, invoke_ms=start, complete_ms=end
    )


def cas(
    key: str,
    expected: str | None,
    value: str,
    result: bool | None,
    start: int,
    end: int | None,
    client: int = 0,
) -> Operation:
    return Operation(
        client=client,
        op="cas",
        key=key,
        expected=expected,
        value=value,
        result=result,
        invoke_ms=start,
        complete_ms=end,
    )


LINEARIZABLE = {
    "sequential put then get": [put("x", "1", 0, 10), get("x", "1", 20, 30)],
    "a get before any put sees nothing": [get("x", None, 0, 10), put("x", "1", 20, 30)],
    "a read concurrent with a put sees the old value": [
        put("x", "1", 0, 100),
        get("x", None, 10, 20),
    ],
    "a read concurrent with a put sees the new value": [
        put("x", "1", 0, 100),
        get("x", "1", 10, 20),
    ],
    "two concurrent puts, reads agree on the later one": [
        put("x", "1", 0, 50, client=1),
        put("x", "2", 0, 50, client=2),
        get("x", "1", 60, 70),
        get("x", "1", 80, 90),
    ],
    "a cas concurrent with a put may swap before it": [
        put("x", "1", 0, 10),
        put("x", "2", 20, 60, client=1),
        cas("x", "1", "3", True, 30, 40, client=2),
        get("x", "2", 70, 80),
    ],
    "a cas that fails saw another value": [
        put("x", "1", 0, 10),
        cas("x", "2", "3", False, 20, 30),
        get("x", "1", 40, 50),
    ],
    "a cas on an absent key creates it": [
        cas("x", None, "1", True, 0, 10),
        cas("x", None, "2", False, 20, 30),
        get("x", "1", 40, 50),
    ],
    "events at the same millisecond are concurrent": [
        put("x", "1", 0, 10),
        get("x", None, 10, 20),
    ],
    "a put with an unknown outcome took effect": [
        put("x", "1", 0, None),
        get("x", "1", 100, 110),
    ],
    "a put with an unknown outcome never took effect": [
        put("x", "1", 0, None),
        get("x", None, 100, 110),
    ],
    "a put with an unknown outcome takes effect late": [
        put("x", "1", 0, None),
        get("x", None, 100, 110),
        get("x", "1", 200, 210),
    ],
    "a cas with an unknown outcome took effect": [
        put("x", "1", 0, 10),
        cas("x", "1", "2", None, 20, None),
        get("x", "2", 100, 110),
    ],
    "two unknown puts of one value may both take effect": [
        put("x", "1", 0, None, client=1),
        put("x", "1", 0, None, client=2),
        get("x", "1", 10, 20),
        put("x", "2", 30, 40),
        get("x", "2", 50, 60),
        get("x", "1", 70, 80),
    ],
    "unknown cas operations chain": [
        cas("x", None, "a", None, 0, None, client=1),
        cas("x", "a", "b", None, 0, None, client=2),
        get("x", "b", 10, 20),
    ],
    "an unknown write of a value nobody reads explains a failed cas": [
        put("x", "1", 0, 10),
        put("x", "unread", 20, None),
        cas("x", "1", "3", False, 30, 40),
    ],
    "unknown writes of different values are not interchangeable": [
        put("x", "a", 0, None, client=1),
        put("x", "b", 0, None, client=2),
        cas("x", None, "z", False, 10, 20),  # one of them took effect: which one matters
        put("x", "c", 30, 40),
        get("x", "a", 50, 60),
    ],
    "a get with an unknown outcome is ignored": [
        put("x", "1", 0, 10),
        get("x", "never written", 20, None),
    ],
}

NOT_LINEARIZABLE = {
    "stale read": [put("x", "1", 0, 10), put("x", "2", 20, 30), get("x", "1", 40, 50)],
    "lost write": [put("x", "1", 0, 10), get("x", None, 20, 30)],
    "a read of a value never written": [put("x", "1", 0, 10), get("x", "2", 20, 30)],
    "reads go back in time": [
        put("x", "1", 0, 100),
        get("x", "1", 10, 20),
        get("x", None, 30, 40),
    ],
    "two cas from absent both swap": [
        cas("x", None, "1", True, 0, 50, client=1),
        cas("x", None, "2", True, 0, 50, client=2),
    ],
    "a cas fails although it found its value": [
        put("x", "1", 0, 10),
        cas("x", "1", "2", False, 20, 30),
    ],
    "a read misses a successful cas": [
        put("x", "1", 0, 10),
        cas("x", "1", "2", True, 20, 30),
        get("x", "1", 40, 50),
    ],
    "a cas swaps a value that was not there": [
        put("x", "1", 0, 10),
        cas("x", "2", "3", True, 20, 30),
    ],
    "an unknown put cannot explain a read before its invocation": [
        get("x", "1", 0, 10),
        put("x", "1", 20, None),
    ],
    "after an unknown write explained a failed cas, its old value is gone": [
        put("x", "1", 0, 10),
        put("x", "unread", 20, None),
        cas("x", "1", "3", False, 30, 40),
        get("x", "1", 50, 60),
    ],
    "an unknown put takes effect at most once": [
        put("x", "1", 0, None),
        get("x", "1", 10, 20),
        put("x", "2", 30, 40),
        get("x", "1", 50, 60),
    ],
}


@pytest.mark.parametrize("name", sorted(LINEARIZABLE))
def test_linearizable_history(name: str) -> None:
    result = check_history(LINEARIZABLE[name])
    assert result.outcome == "ok", result.message
    assert result.ok


@pytest.mark.parametrize("name", sorted(NOT_LINEARIZABLE))
def test_not_linearizable_history(name: str) -> None:
    ops = NOT_LINEARIZABLE[name]
    result = check_history(ops)
    assert result.outcome == "violation"
    assert not result.ok
    assert result.key == "x"
    assert result.ops and set(result.ops) <= set(ops)
    assert check_key(result.ops) == "violation"


def test_keys_are_checked_apart() -> None:
    """A value on one key says nothing about another; the violation names its key."""
    ops = [
        put("a", "1", 0, 10),
        get("b", None, 20, 30),
        put("b", "2", 40, 50),
        get("a", "1", 60, 70),
        get("b", None, 80, 90),
    ]
    result = check_history(ops)
    assert result.outcome == "violation"
    assert result.key == "b"
    assert set(result.ops) <= {op for op in ops if op.key == "b"}


def test_the_explanation_keeps_the_write_a_stale_read_saw() -> None:
    """Operations not needed for the violation go; the write the stale read returned stays."""
    noise = [put("x", "0", 0, 1), get("x", "0", 2, 3)]
    stale = [put("x", "1", 10, 11), put("x", "2", 20, 21), get("x", "1", 30, 31)]
    later = [put("x", "3", 40, 41), get("x", "3", 50, 51)]
    result = check_history(noise + stale + later)
    assert result.outcome == "violation"
    assert list(result.ops) == stale


def test_a_search_over_budget_is_unknown_not_a_verdict() -> None:
    ops = [put("x", str(i), 0, 100, client=i) for i in range(12)]
    ops.append(get("x", "3", 200, 210))
    assert check_history(ops).ok
    result = check_history(ops, max_steps=5)
    assert result.outcome == "unknown"
    assert result.key == "x"
    assert not result.ok


def test_a_violation_wins_over_an_unknown_key() -> None:
    hard = [put("a", str(i), 0, 100, client=i) for i in range(12)]
    bad = [put("b", "1", 0, 10), get("b", None, 20, 30)]
    result = check_history(hard + bad, max_steps=20)
    assert result.outcome == "violation"
    assert result.key == "b"


def test_operations_are_validated() -> None:
    with pytest.raises(ValueError, match="completes before"):
        put("x", "1", 10, 5)
    with pytest.raises(ValueError, match="needs a value"):
        Operation(client=0, op="put", key="x", invoke_ms=0, complete_ms=1)
    with pytest.raises(ValueError, match="unknown operation"):
        Operation(client=0, op="delete", key="x", invoke_ms=0, complete_ms=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="returns a bool"):
        cas("x", None, "1", None, 0, 1)


# -- Properties -----------------------------------------------------------------------------


@dataclass
class Step:
    """One operation of a sequential execution, with how its interval stretches around its
    linearization point and whether its client learned the outcome."""

    kind: OpKind
    key: str
    value: str
    expected: str | None
    before: int
    after: int
    unknown: bool
    took_effect: bool


steps = st.builds(
    Step,
    kind=st.sampled_from(["put", "get", "cas"]),
    key=st.sampled_from(["a", "b"]),
    value=st.sampled_from(["v0", "v1", "v2"]),
    expected=st.sampled_from([None, "v0", "v1", "v2"]),
    before=st.integers(0, 60),
    after=st.integers(0, 60),
    unknown=st.sampled_from([False, False, False, True]),  # a quarter time out
    took_effect=st.booleans(),
)


def history_of(execution: list[Step]) -> list[Operation]:
    """The history clients would see of ``execution`` run in order, one operation every
    10 ms, each interval containing its instant. An unknown outcome may not have taken effect
    (then the state does not change)."""
    state: dict[str, str | None] = {}
    ops = []
    for index, step in enumerate(execution):
        at = 10 * index + 100
        current = state.get(step.key)
        applied = not step.unknown or step.took_effect
        result: str | bool | None = None
        if step.kind == "get":
            result = current
        elif step.kind == "put" or current == step.expected:
            result = True if step.kind == "cas" else None
            if applied:
                state[step.key] = step.value
        else:
            result = False
        ops.append(
            Operation(
                client=index,
                op=step.kind,
                key=step.key,
                value=None if step.kind == "get" else step.value,
                expected=step.expected if step.kind == "cas" else None,
                result=None if step.unknown else result,
                invoke_ms=at - step.before,
                complete_ms=None if step.unknown else at + step.after,
            )
        )
    return ops


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=30))
def test_a_history_of_a_sequential_execution_is_linearizable(execution: list[Step]) -> None:
    result = check_history(history_of(execution))
    assert result.ok, result


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=30), st.data())
def test_a_read_of_a_value_never_written_is_never_linearizable(
    execution: list[Step], data: st.DataObject
) -> None:
    last_read = Step("get", "a", "v0", None, 0, 0, unknown=False, took_effect=True)
    ops = history_of([*execution, last_read])  # at least one read to corrupt
    reads = [i for i, op in enumerate(ops) if op.op == "get" and op.complete_ms is not None]
    victim = data.draw(st.sampled_from(reads))
    bad = ops[victim]
    ops[victim] = get(bad.key, "never written", bad.invoke_ms, bad.complete_ms, bad.client)
    result = check_history(ops)
    assert result.outcome == "violation"
    assert result.key == bad.key
    assert check_key(result.ops) == "violation"
