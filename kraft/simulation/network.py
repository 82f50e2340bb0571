"""The simulated network: per-link latency, loss, duplication, reordering and partitions.

Links are one-way (``(source, destination)``). Each carries a :class:`LinkConfig`; the default
applies to every link without its own. Without reordering a link is FIFO, as a TCP connection
is: a message never arrives before one sent earlier on the same link. ``reorder`` is the
chance that a message skips that rule and takes up to three times the link's worst latency.

Partitions are sets of blocked links, checked when a message *arrives* (so a partition also
cuts what is in flight, as Kafka's simulation does).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kraft.config import ConfigError

__all__ = ["LinkConfig", "SimNetwork"]


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """How one link behaves. Rates are probabilities per message, in [0, 1)."""

    latency_ms: tuple[int, int] = (1, 5)
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0

    def __post_init__(self) -> None:
        lo, hi = self.latency_ms
        if not 0 <= lo <= hi:
            raise ConfigError(f"latency_ms must be (lo, hi) with 0 <= lo <= hi, got {lo, hi}")
        for name in ("drop", "duplicate", "reorder"):
            rate = getattr(self, name)
            if not 0.0 <= rate < 1.0:
                raise ConfigError(f"{name} rate must be in [0, 1), got {rate}")


class SimNetwork:
    """Decides when (and whether) each message arrives. All randomness comes from ``rand``."""

    __slots__ = ("_fifo", "_links", "blocked", "default", "rand")

    def __init__(self, rand: random.Random, default: LinkConfig | None = None) -> None:
        self.rand = rand
        self.default = LinkConfig() if default is None else default
        self._links: dict[tuple[int, int], LinkConfig] = {}
        self._fifo: dict[tuple[int, int], int] = {}
        #: One-way links that deliver nothing.
        self.blocked: set[tuple[int, int]] = set()

    def configure(
        self,
        *,
        drop: float | None = None,
        duplicate: float | None = None,
        reorder: float | None = None,
        latency_ms: tuple[int, int] | None = None,
        links: Iterable[tuple[int, int]] | None = None,
    ) -> None:
        """Change the given settings on ``links`` (every link, and the default, when None)."""
        changes: dict[str, object] = {}
        if drop is not None:
            changes["drop"] = drop
        if duplicate is not None:
            changes["duplicate"] = duplicate
        if reorder is not None:
            changes["reorder"] = reorder
        if latency_ms is not None:
            changes["latency_ms"] = (int(latency_ms[0]), int(latency_ms[1]))
        if links is None:
            self.default = replace(self.default, **changes)  # type: ignore[arg-type]
            self._links = {
                link: replace(cfg, **changes)  # type: ignore[arg-type]
                for link, cfg in self._links.items()
            }
        else:
            for link in links:
                self._links[link] = replace(
                    self._links.get(link, self.default),
                    **changes,  # type: ignore[arg-type]
                )

    def link(self, source: int, destination: int) -> LinkConfig:
        return self._links.get((source, destination), self.default)

    def uniform(self) -> LinkConfig | None:
        """The default when it is every link's config and no link is blocked, else None."""
        return None if self._links or self.blocked else self.default

    def is_blocked(self, source: int, destination: int) -> bool:
        return (source, destination) in self.blocked

    def delivery_times(self, source: int, destination: int, now_ms: int) -> tuple[int, ...]:
        """When the copies of a message sent now arrive: none (lost), one, or two."""
        cfg = self._links.get((source, destination), self.default)
        rand = self.rand
        if cfg.drop and rand.random() < cfg.drop:
            return ()
        first = self._arrival(source, destination, cfg, now_ms)
        if cfg.duplicate and rand.random() < cfg.duplicate:
            return first, self._arrival(source, destination, cfg, now_ms, reordered=True)
        return (first,)

    def _arrival(
        self, source: int, destination: int, cfg: LinkConfig, now_ms: int, reordered: bool = False
    ) -> int:
        lo, hi = cfg.latency_ms
        rand = self.rand
        if reordered or (cfg.reorder and rand.random() < cfg.reorder):
            return now_ms + rand.randint(lo, 3 * hi + 1)
        at = now_ms + (lo if lo == hi else rand.randint(lo, hi))
        link = (source, destination)
        last = self._fifo.get(link, 0)
        at = max(at, last)
        self._fifo[link] = at
        return at

    # -- partitions ---------------------------------------------------------------------------
    def partition(self, groups: list[set[int]], nodes: Iterable[int]) -> None:
        """Cut every link between different groups (nodes in none form one more group)."""
        everyone = set(nodes)
        listed = set().union(*groups) if groups else set()
        unknown = listed - everyone
        if unknown:
            raise ConfigError(f"partition names unknown nodes {sorted(unknown)}")
        all_groups = [g for g in groups if g]
        rest = everyone - listed
        if rest:
            all_groups.append(rest)
        group_of = {node: i for i, group in enumerate(all_groups) for node in group}
        for a in everyone:
            for b in everyone:
                if a != b and group_of[a] != group_of[b]:
                    self.blocked.add((a, b))

    def block(self, sources: Iterable[int], destinations: Iterable[int]) -> None:
        """Cut the one-way links from each source to each destination."""
        dests = list(destinations)
        for a in sources:
            for b in dests:
                if a != b:
                    self.blocked.add((a, b))

    def heal(self) -> None:
        """Restore every link (latency and loss settings stay)."""
        self.blocked.clear()
