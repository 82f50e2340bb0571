"""``MockableRandom``: a seeded ``random.Random`` whose next draws a test can fix."""

from __future__ import annotations

import random

__all__ = ["MockableRandom"]


class MockableRandom(random.Random):
    """A seeded ``random.Random`` whose next ``randrange`` draws can be queued, as Kafka's
    raft tests do with ``MockableRandom.mockNextInt``.

    The client draws only with ``randrange(n)``: the jitter of its election timeout
    (``n`` = ``election_timeout_ms``, the timeout being ``election_timeout_ms`` + the draw), a
    lost candidate's backoff factor (``n`` = ``2 << min(20, retries - 1)``, the backoff being
    ``min(100 ms x the draw, election_backoff_max_ms)``, Kafka's
    ``binaryExponentialElectionBackoffMs``) and the bootstrap server it tries
    first (``n`` = how many there are). Fix one and a test can assert that timer exactly.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._queued: list[tuple[int | None, int]] = []

    def queue_draws(self, *values: int, bound: int | None = None) -> None:
        """The next draws are ``values``, in order: each is a draw from [0, n) for a range of
        n values, so ``randrange(n)`` returns it as is and ``randrange(start, stop, step)``
        returns ``start + step * value``. With ``bound``, only a draw from a range of that
        many values takes them; the others, and every draw once the queue is empty, come
        from the seeded generator."""
        self._queued.extend((bound, value) for value in values)

    @property
    def queued_draws(self) -> list[tuple[int | None, int]]:
        """The ``(bound, value)`` pairs not drawn yet (assert it is empty to be sure the
        client drew them)."""
        return list(self._queued)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        choices = range(start) if stop is None else range(start, stop, step)
        for index, (bound, value) in enumerate(self._queued):
            if bound is None or bound == len(choices):
                if not 0 <= value < len(choices):
                    raise ValueError(f"the queued draw {value} is not in [0, {len(choices)})")
                del self._queued[index]
                return choices[value]
        return super().randrange(start, stop, step)
