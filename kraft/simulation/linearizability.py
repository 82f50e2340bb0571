"""A linearizability checker for histories of a key-value register (put, get, cas).

A history is what clients saw: each :class:`Operation` was invoked at ``invoke_ms`` and
completed at ``complete_ms`` with ``result``. It is *linearizable* when every operation can be
given one instant between its invocation and its completion such that, taken in the order of
those instants, the operations are a legal sequential execution of a key-value map (Herlihy &
Wing). :func:`check_history` decides it with Wing & Gong's search as improved by Lowe
("just-in-time linearization" with a cache of visited configurations), the algorithm of
Knossos and Porcupine:

- **Per key.** Operations on different keys commute, so the history is linearizable iff each
  key's sub-history is (P-compositionality, Horn & Kroening); each key is checked alone, and
  each register's state is just its value.
- **The search.** The call and return events of a key's operations are sorted by time (a call
  before a return at the same millisecond: the checker cannot tell which came first, so it
  treats them as concurrent). Walking the events from the first, the search *linearizes* a
  call by applying its operation to the register when the result it returned matches, and
  removes its events; reaching a return whose call is not linearized means some earlier choice
  was wrong, so it backtracks. A configuration (the set of linearized operations, the value)
  seen before is not explored twice (Lowe's memoization), which keeps the usual histories
  polynomial.
- **Unknown outcomes.** An operation whose outcome the client never learned (a timeout after
  which a write may or may not have taken effect) has ``complete_ms = None``: it may take
  effect at any instant after its invocation, or never. Its return is placed after every
  event; "never" is the same as "after everything", since nothing observes it then. A get
  with an unknown outcome constrains nothing and is dropped; failures that definitely did not
  take effect (``NotLeaderError``) are for the caller to leave out of the history.
- **Bounded.** The search may be exponential on adversarial histories (many concurrent
  writes of the same value with unknown outcomes). Each key's search stops after
  ``max_steps`` steps and the result is then ``"unknown"``, never a hang.

A violation is explained by a small sub-history of the key at fault: the operations left
after removing, one at a time, every operation whose removal keeps the history
non-linearizable (1-minimal, as far as a step budget allows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

import msgspec

__all__ = ["CheckResult", "OpKind", "Operation", "check_history", "check_key"]

#: The operations of the register: ``put(key, value) -> None``, ``get(key) -> value | None``,
#: ``cas(key, expected, value) -> bool`` (True if it swapped; ``expected=None`` means "the key
#: is absent").
OpKind = Literal["put", "get", "cas"]

Outcome = Literal["ok", "violation", "unknown"]

#: Steps (events visited) a key's search may take before it gives up as "unknown".
DEFAULT_MAX_STEPS = 2_000_000


class Operation(msgspec.Struct, frozen=True, kw_only=True):
    """One operation as a client saw it.

    ``value`` is what a put writes or a cas writes on success; ``expected`` is what a cas
    compares with; ``result`` is what a get returned (the value, or ``None`` for an absent
    key) or whether a cas swapped (puts return ``None``). ``complete_ms=None``: the outcome is
    unknown (``result`` is then ignored).
    """

    client: int
    op: OpKind
    key: str
    invoke_ms: int
    complete_ms: int | None
    value: str | None = None
    expected: str | None = None
    result: str | bool | None = None

    def __post_init__(self) -> None:
        if self.complete_ms is not None and self.complete_ms < self.invoke_ms:
            raise ValueError(f"{self}: completes before it is invoked")
        if self.op in ("put", "cas") and self.value is None:
            raise ValueError(f"{self}: a {self.op} needs a value")
        if self.op == "cas" and self.complete_ms is not None and type(self.result) is not bool:
            raise ValueError(f"{self}: a completed cas returns a bool")


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`check_history` found.

    ``outcome``: "ok" (linearizable), "violation" (not linearizable: ``key`` is the first key
    at fault, ``ops`` a small sub-history of it that is not linearizable by itself), or
    "unknown" (a key's search ran out of its step budget: ``key`` names it, ``ops`` is empty).
    """

    outcome: Outcome
    key: str | None = None
    ops: tuple[Operation, ...] = ()
    message: str = ""

    @property
    def ok(self) -> bool:
        """True only if the history was shown linearizable."""
        return self.outcome == "ok"


def check_history(ops: Iterable[Operation], *, max_steps: int = DEFAULT_MAX_STEPS) -> CheckResult:
    """Whether ``ops`` is linearizable, checking each key alone (see the module docstring).

    Every key starts absent. A violation on any key wins over a search that gave up on
    another; keys are checked in sorted order.
    """
    by_key: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    gave_up: str | None = None
    for key in sorted(by_key):
        outcome = check_key(by_key[key], max_steps=max_steps)
        if outcome == "violation":
            small = _shrink(by_key[key], max_steps)
            return CheckResult(
                outcome="violation",
                key=key,
                ops=tuple(small),
                message=f"key {key!r}: these {len(small)} of its {len(by_key[key])} operations "
                "admit no linearization",
            )
        if outcome == "unknown" and gave_up is None:
            gave_up = key
    if gave_up is not None:
        return CheckResult(
            outcome="unknown",
            key=gave_up,
            message=f"key {gave_up!r}: the search took more than {max_steps} steps",
        )
    return CheckResult(outcome="ok")


def check_key(ops: Sequence[Operation], *, max_steps: int = DEFAULT_MAX_STEPS) -> Outcome:
    """Whether the operations of one key (starting absent) are linearizable."""
    return _search(ops, max_steps).outcome


class _Search(NamedTuple):
    outcome: Outcome
    steps: int
    #: The operations the search looked at: those whose call comes before the furthest
    #: event it reached (the others cannot have mattered to a violation).
    touched: list[Operation]


def _legal(op: Operation, state: str | None) -> tuple[bool, str | None]:
    """The register's sequential specification: whether ``op``'s result is what it returns
    from ``state``, and the state after it."""
    if op.op == "put":
        return True, op.value
    if op.op == "get":
        return op.result == state, state
    known = op.complete_ms is not None
    if state == op.expected:  # a cas that finds its expected value swaps
        return not known or op.result is True, op.value
    return not known or op.result is False, state


class _Events:
    """The call and return events of a key's operations as a doubly linked list in time
    order, node 0 the head sentinel and -1 the end; a call at the same millisecond as a
    return comes first (the two are concurrent). An unknown outcome returns after every
    event."""

    __slots__ = ("call_node", "is_call", "match", "nxt", "op_of", "prv")

    def __init__(self, ops: Sequence[Operation]) -> None:
        never = 1 + max(max(op.invoke_ms, op.complete_ms or 0) for op in ops)
        events = [(op.invoke_ms, 0, i) for i, op in enumerate(ops)]
        events += [
            (never if op.complete_ms is None else op.complete_ms, 1, i) for i, op in enumerate(ops)
        ]
        events.sort()
        size = len(events) + 1
        self.nxt = [-1] * size
        self.prv = [-1] * size
        self.op_of = [0] * size
        self.is_call = [False] * size
        self.match = [0] * size  # a call's return node
        self.call_node = [0] * len(ops)
        for node, (_, kind, i) in enumerate(events, start=1):
            self.op_of[node] = i
            self.prv[node] = node - 1
            self.nxt[node - 1] = node
            if kind == 0:
                self.is_call[node] = True
                self.call_node[i] = node
            else:
                self.match[self.call_node[i]] = node

    def lift(self, call: int) -> None:
        """Take a linearized operation's call and return out of the list."""
        nxt, prv = self.nxt, self.prv
        for x in (call, self.match[call]):
            nxt[prv[x]] = nxt[x]
            if nxt[x] != -1:
                prv[nxt[x]] = prv[x]

    def unlift(self, call: int) -> None:
        """Put them back (the reverse of :meth:`lift`)."""
        nxt, prv = self.nxt, self.prv
        for x in (self.match[call], call):
            nxt[prv[x]] = x
            if nxt[x] != -1:
                prv[nxt[x]] = x


def _search(ops: Sequence[Operation], max_steps: int) -> _Search:
    ops = [op for op in ops if not (op.op == "get" and op.complete_ms is None)]
    if not ops:
        return _Search("ok", 0, [])
    events = _Events(ops)
    nxt, is_call, op_of = events.nxt, events.is_call, events.op_of
    state: str | None = None
    linearized = 0  # a bit per operation
    seen: set[tuple[int, str | None]] = set()
    stack: list[tuple[int, str | None]] = []  # (call node, state before it)
    node = nxt[0]
    furthest = node
    steps = 0
    while nxt[0] != -1:
        steps += 1
        if steps > max_steps:
            return _Search("unknown", steps, ops)
        furthest = max(furthest, node)
        if not is_call[node]:
            # A return whose call is not linearized yet: undo the last choice, try the next.
            if not stack:
                touched = [op for i, op in enumerate(ops) if events.call_node[i] <= furthest]
                return _Search("violation", steps, touched)
            node, state = stack.pop()
            linearized &= ~(1 << op_of[node])
            events.unlift(node)
            node = nxt[node]
            continue
        legal, after = _legal(ops[op_of[node]], state)
        if legal:
            config = (linearized | (1 << op_of[node]), after)
            if config not in seen:
                seen.add(config)
                stack.append((node, state))
                linearized, state = config
                events.lift(node)
                node = nxt[0]
                continue
        node = nxt[node]
    return _Search("ok", steps, ops)


def _shrink(ops: list[Operation], max_steps: int) -> list[Operation]:
    """A small non-linearizable sub-history of ``ops`` (which is not linearizable).

    First the operations the failed search touched; then each operation in turn is dropped
    while the rest stays non-linearizable (1-minimal), until ``max_steps`` steps were spent
    in all: past that budget the rest is kept as it is. A write whose value a kept operation
    observed stays: without it a stale read would shrink to "a read of a value never written",
    true but no explanation.
    """
    written = {op.value for op in ops if op.op != "get"}
    kept = _search(ops, max_steps).touched
    budget = max_steps
    shrunk = True
    while shrunk and budget > 0:  # passes until none drops anything (a write may go once
        shrunk = False  # its readers went)
        i = 0
        while i < len(kept) and budget > 0:
            candidate = kept[:i] + kept[i + 1 :]
            if _observed(candidate) & written <= {op.value for op in candidate if op.op != "get"}:
                attempt = _search(candidate, budget)
                budget -= attempt.steps
                if attempt.outcome == "violation":
                    kept, shrunk = attempt.touched, True
                    continue
            i += 1
    return kept


def _observed(ops: Iterable[Operation]) -> set[str | None]:
    """The values that completed operations saw: what gets returned, and what successful
    cas operations found."""
    seen: set[str | None] = set()
    for op in ops:
        if op.op == "get" and op.complete_ms is not None and isinstance(op.result, str):
            seen.add(op.result)
        elif op.op == "cas" and op.result is True and op.expected is not None:
            seen.add(op.expected)
    return seen
