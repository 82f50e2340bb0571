"""Shrinking a failing run's fault schedule: the fewest faults that still make it fail.

:func:`ddmin` is Zeller and Hildebrandt's delta debugging ("Simplifying and Isolating
Failure-Inducing Input", 2002) over any list, with a bound on the tests it may run.
:func:`shrink` applies it to the faults a run injected: a candidate keeps some of them and
re-runs the scenario with the others suppressed (``run_scenario(..., suppress=...)``, by fault
index in call order). It "still fails" when it fails in at least one of the ways the original
did (:attr:`RunResult.failure_kinds`). The scenario is a black box: suppressing a fault may
change what the scenario does next, and so what the later indices name; ddmin only needs the
test to be deterministic, which a seeded run is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kraft.simulation.cluster import SimulationError
from kraft.simulation.scenario import RunResult, run_scenario

__all__ = ["DEFAULT_MAX_RUNS", "ShrinkResult", "ddmin", "injected_faults", "shrink"]

T = TypeVar("T")

#: The default bound on the runs one shrink may make.
DEFAULT_MAX_RUNS = 500


def ddmin(
    items: Sequence[T], fails: Callable[[Sequence[T]], bool], max_tests: int | None = None
) -> tuple[list[T], bool]:
    """A 1-minimal sublist of ``items`` (order kept) on which ``fails`` holds, and whether the
    search finished: False when ``max_tests`` calls of ``fails`` ran out first (the list is
    then the smallest failing one found so far).

    ``fails(items)`` is assumed to hold and is not called. Every candidate is tested at most
    once; the empty list is tried first, since a failure that needs no item is common and
    cheap to find.
    """
    tested: dict[tuple[int, ...], bool] = {}
    budget = [max_tests]

    def test(indices: Sequence[int]) -> bool:
        key = tuple(indices)
        if key not in tested:
            if budget[0] is not None:
                if budget[0] <= 0:
                    raise _OutOfTestsError
                budget[0] -= 1
            tested[key] = fails([items[i] for i in key])
        return tested[key]

    current = list(range(len(items)))
    try:
        if current and test([]):
            return [], True
        granularity = 2
        while len(current) >= 2:
            chunks = _split(current, granularity)
            reduced = False
            for chunk in chunks:  # reduce to a subset
                if test(chunk):
                    current, granularity, reduced = chunk, 2, True
                    break
            if not reduced and granularity > 2:  # with 2 chunks a complement is a subset
                for i in range(len(chunks)):  # reduce to a complement
                    complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                    if test(complement):
                        current, granularity, reduced = complement, max(granularity - 1, 2), True
                        break
            if not reduced:
                if granularity >= len(current):
                    break
                granularity = min(2 * granularity, len(current))
    except _OutOfTestsError:
        return [items[i] for i in current], False
    return [items[i] for i in current], True


class _OutOfTestsError(Exception):
    pass


def _split(indices: list[int], parts: int) -> list[list[int]]:
    """``indices`` in ``parts`` contiguous chunks of near-equal size."""
    size, extra = divmod(len(indices), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        chunks.append(indices[start:end])
        start = end
    return chunks


def injected_faults(result: RunResult) -> list[dict[str, Any]]:
    """The faults ``result``'s run injected (its ``faults`` less the suppressed ones)."""
    return [f for f in result.faults if not f.get("suppressed", False)]


@dataclass(frozen=True, slots=True)
class ShrinkResult:
    """How a shrink went: the original run, the smallest failing run found, and the cost."""

    original: RunResult
    #: The final run: the original with every fault suppressed except ``kept``.
    result: RunResult
    #: The fault indices ddmin kept, numbered as in the original run. Suppressing a fault can
    #: renumber the later ones (when the scenario then makes other calls), so what the final
    #: run injected is :attr:`remaining_faults`.
    kept: tuple[int, ...]
    #: The indices the final run suppresses (pass to ``--suppress`` to replay it).
    suppressed: tuple[int, ...]
    #: Scenario runs made while searching (the confirming runs included).
    runs: int
    #: Whether ddmin finished (the kept set is 1-minimal) rather than running out of runs.
    minimal: bool

    @property
    def remaining_faults(self) -> list[dict[str, Any]]:
        """The faults the final run injected."""
        return injected_faults(self.result)


def shrink(
    original: RunResult,
    *,
    scenario_dir: Path | str | None = None,
    out_dir: Path | str | None = None,
    max_runs: int = DEFAULT_MAX_RUNS,
    on_run: Callable[[RunResult], None] | None = None,
) -> ShrinkResult:
    """Shrink the fault schedule of the failing run ``original`` (a ``run.json``).

    First re-runs the original to make sure it still fails the same way (else
    :class:`SimulationError`: the scenario changed, or is not deterministic), then runs ddmin
    over its injected faults, then runs the result once more into ``out_dir`` (when given):
    ``max_runs`` runs in all at most. Only that last run writes files.
    """
    if original.ok:
        raise SimulationError(
            f"the run of {original.scenario} seed {original.seed} passed: nothing to shrink"
        )
    if max_runs < 2:
        raise SimulationError(f"max_runs must be at least 2, got {max_runs}")
    kinds = original.failure_kinds
    already = set(original.suppressed)
    candidates = [f["index"] for f in injected_faults(original)]
    runs = 0

    def run(suppress: set[int], out: Path | str | None = None) -> RunResult:
        nonlocal runs
        runs += 1
        result = run_scenario(
            original.scenario,
            original.seed,
            out,
            suppress=sorted(suppress),
            message_events=original.message_events,
            scenario_dir=scenario_dir,
        )
        if on_run is not None:
            on_run(result)
        return result

    def still_fails(kept: Sequence[int]) -> bool:
        try:
            result = run(already | (set(candidates) - set(kept)))
        except SimulationError:  # a livelock is another failure, not this one
            return False
        return bool(result.failure_kinds & kinds)

    again = run(already)
    if again.digest != original.digest or not again.failure_kinds & kinds:
        raise SimulationError(
            f"re-running {original.scenario} seed {original.seed} did not reproduce the run "
            "(a different event log): was the scenario changed?"
        )
    # The confirming run before and the run that writes the result after count too.
    kept, minimal = ddmin(candidates, still_fails, max_tests=max_runs - 2)
    suppressed = already | (set(candidates) - set(kept))
    final = run(suppressed, out_dir)
    if not final.failure_kinds & kinds:  # pragma: no cover - a deterministic run cannot
        raise SimulationError("the shrunk run passed when run again: the run is not deterministic")
    return ShrinkResult(
        original=original,
        result=final,
        kept=tuple(kept),
        suppressed=tuple(sorted(suppressed)),
        runs=runs,
        minimal=minimal,
    )
