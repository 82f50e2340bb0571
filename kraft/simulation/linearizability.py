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
  effect at any instant after its invocation, or never: it has no return event, and the
  search succeeds once every known operation is linearized ("never" is the same as "after
  everything", since nothing observes it then). A get
  with an unknown outcome constrains nothing and is dropped; failures that definitely did not
  take effect (``NotLeaderError``) are for the caller to leave out of the history.
- **Unknown outcomes, cheaply.** Unknown operations of the same kind, value and expected
  value are interchangeable, values that no operation observes are merged into one, and an
  unknown operation is tried only after the known ones and only where it changes the value;
  configurations are memoized up to dominance (:func:`_search`).
- **Bounded.** The search may be exponential on adversarial histories (many concurrent
  operations on one key, few distinct values, many unknown outcomes), and proving a
  violation costs more than accepting a linearizable history: every configuration before
  the violation is explored. Each key's search stops after ``max_steps`` steps (a step takes
  about a microsecond; the default, 5 million, bounds a key to seconds and ~100 MB) and the
  result is then ``"unknown"``, never a hang. Measured on one core: 3,000 operations of 5
  clients over 5 keys with 5% unknown outcomes check in 0.03 s; 3,000 operations of 10
  clients on one key in about 1 s (1.4 million steps).

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

#: Steps (events and unknown classes visited) a key's search may take before it gives up as
#: "unknown"; shrinking a violation's explanation gets as many again.
DEFAULT_MAX_STEPS = 5_000_000


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
        if self.op not in ("put", "get", "cas"):
            raise ValueError(f"{self}: unknown operation {self.op!r}")
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
    """The events of a key's operations, numbered in time order (a call at the same
    millisecond as a return comes first: the two are concurrent). The calls and returns of
    the operations with a known outcome form a doubly linked list from node 0 to -1; the calls
    of the unknown ones (which never return) are numbered but not linked."""

    __slots__ = ("call_node", "is_call", "match", "nxt", "op_of", "prv")

    def __init__(self, ops: Sequence[Operation]) -> None:
        events = [(op.invoke_ms, 0, i) for i, op in enumerate(ops)]
        events += [(op.complete_ms, 1, i) for i, op in enumerate(ops) if op.complete_ms is not None]
        events.sort()
        size = len(events) + 1
        self.nxt = [-1] * size
        self.prv = [-1] * size
        self.op_of = [0] * size
        self.is_call = [False] * size
        self.match = [0] * size  # a known call's return node
        self.call_node = [0] * len(ops)
        tail = 0
        for node, (_, kind, i) in enumerate(events, start=1):
            self.op_of[node] = i
            if kind == 0:
                self.is_call[node] = True
                self.call_node[i] = node
            else:
                self.match[self.call_node[i]] = node
            if ops[i].complete_ms is not None:
                self.prv[node] = tail
                self.nxt[tail] = node
                tail = node

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


class _UnknownClasses:
    """The operations with an unknown outcome, in classes of the same kind, value and
    expected value, each in invocation order.

    Once invoked, the operations of a class are interchangeable, so the search linearizes
    them in invocation order (the earliest pending one is available whenever a later one is)
    and a configuration needs only how many of each class were linearized. The counts are
    packed in one int, a field of ``width`` bits and a guard bit per class, which makes "every
    count of ``a`` is at most the one of ``b``" one subtraction: no field borrows, so every
    guard bit survives.
    """

    __slots__ = ("guards", "members", "unit")

    def __init__(self, ops: Sequence[Operation]) -> None:
        by_class: dict[tuple[str, str | None, str | None], list[int]] = {}
        for i in sorted(range(len(ops)), key=lambda i: ops[i].invoke_ms):
            op = ops[i]
            if op.complete_ms is None:
                by_class.setdefault((op.op, op.value, op.expected), []).append(i)
        self.members = list(by_class.values())
        width = sum(map(len, self.members)).bit_length() + 1
        #: What adds one to a class's count.
        self.unit = [1 << (c * width) for c in range(len(self.members))]
        self.guards = sum(unit << (width - 1) for unit in self.unit)

    def at_most(self, a: int, b: int) -> bool:
        """Whether every count in ``a`` is at most the one in ``b``."""
        guards = self.guards
        return ((b | guards) - a) & guards == guards


def _search(  # noqa: PLR0912, PLR0915 -- the hot loop; in calls it ran half as fast
    ops: Sequence[Operation], max_steps: int
) -> _Search:
    """Lowe's just-in-time linearization search over one key's operations.

    Configurations are memoized up to dominance: from (known operations linearized K, state
    s, unknown operations linearized U) every continuation of (K, s, U') with U' holding at
    least as many of each class (:class:`_UnknownClasses`) as U is also open, since the extra
    unknown operations can take effect last, where nothing observes them. For the same reason
    the search succeeds once every known operation is linearized, and an unknown operation
    that would not change the state is not tried. Values nobody observes are merged first
    (:func:`_unobserved_merged`). At each configuration the known calls are tried first, then
    the unknown ones invoked before the first pending return (an order, for speed).
    """
    # The known operations first, in the order of their returns: the ones linearized are
    # then all those before the first pending one, p, and a few after it, so (p, the bits
    # above p) is a small key for the memo where the set itself would take n bits.
    ops = sorted(
        (op for op in ops if not (op.op == "get" and op.complete_ms is None)),
        key=lambda op: (op.complete_ms is None, op.complete_ms or 0, op.invoke_ms),
    )
    if not ops:
        return _Search("ok", 0, [])
    model = _unobserved_merged(ops)
    events = _Events(model)
    nxt, is_call, op_of, call_node = events.nxt, events.is_call, events.op_of, events.call_node
    classes = _UnknownClasses(model)
    members, unit, at_most = classes.members, classes.unit, classes.at_most
    taken = [0] * len(members)  # per class, how many were linearized (the first ones)
    state: str | None = None
    known = 0  # a bit per known operation linearized
    counts = 0  # packed taken
    pending_known = len(ops) - sum(map(len, members))
    # Per (known set, state): the unknown counts explored with it (Lowe's memoization, up to
    # dominance: see the docstring).
    seen: dict[tuple[int, int, str | None], list[int]] = {}
    # (known call node or 0, state before, frontier, unknown class or -1)
    stack: list[tuple[int, str | None, int, int]] = []
    node = nxt[0]
    cls = -1  # -1: walking the known events; else the next unknown class to try
    frontier = 0  # the first return not linearized: only calls before it may be linearized
    furthest = node
    steps = 0
    while pending_known:
        steps += 1
        if steps > max_steps:
            return _Search("unknown", steps, ops)
        if cls < 0:
            furthest = max(furthest, node)
            if not is_call[node]:
                frontier, cls = node, 0
                continue
            i = op_of[node]
            legal, after = _legal(model[i], state)
            if legal:
                next_known = known | (1 << i)
                first = (~next_known & (next_known + 1)).bit_length() - 1
                explored = seen.setdefault((first, next_known >> first, after), [])
                if not any(at_most(u, counts) for u in explored):
                    explored.append(counts)
                    stack.append((node, state, frontier, -1))
                    known = next_known
                    state = after
                    pending_known -= 1
                    events.lift(node)
                    node = nxt[0]
                    continue
            node = nxt[node]
        elif cls == len(members):
            # Nothing left to try here: undo the last choice, try the one after it.
            if not stack:
                touched = [op for i, op in enumerate(ops) if call_node[i] <= furthest]
                return _Search("violation", steps, touched)
            node, state, frontier, cls = stack.pop()
            if cls < 0:
                known &= ~(1 << op_of[node])
                pending_known += 1
                events.unlift(node)
                node = nxt[node]
            else:
                taken[cls] -= 1
                counts -= unit[cls]
                cls += 1
        else:
            k = taken[cls]
            if k < len(members[cls]) and call_node[members[cls][k]] < frontier:
                _, after = _legal(model[members[cls][k]], state)
                if after != state:
                    first = (~known & (known + 1)).bit_length() - 1
                    explored = seen.setdefault((first, known >> first, after), [])
                    next_counts = counts + unit[cls]
                    if not any(at_most(u, next_counts) for u in explored):
                        explored.append(next_counts)
                        stack.append((0, state, frontier, cls))
                        taken[cls] += 1
                        counts = next_counts
                        state = after
                        node, cls = nxt[0], -1
                        continue
            cls += 1
    return _Search("ok", steps, ops)


def _unobserved_merged(ops: list[Operation]) -> list[Operation]:
    """``ops`` with every value written that no operation observes replaced by one value.

    The register's behaviour depends on its value only through comparisons with what gets
    return and what cas operations expect, and a value never returned nor expected is unequal
    to all of those: any two such values behave the same. Merging them makes unknown writes
    of such values one class (see :class:`_UnknownCounts`) and their states one state.
    """
    observed: set[str | None] = {op.expected for op in ops if op.op == "cas"}
    observed.update(op.result for op in ops if op.op == "get" and isinstance(op.result, str))
    unobserved = "\0" * (1 + max((len(v) for v in observed if v is not None), default=0))
    return [
        op
        if op.op == "get" or op.value in observed
        else msgspec.structs.replace(op, value=unobserved)
        for op in ops
    ]


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
