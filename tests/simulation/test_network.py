"""``SimNetwork`` on its own: latency, FIFO links, loss, duplication, reordering, partitions.

Rates are checked over many messages with a fixed seed, so the counts are exact for that seed;
the bounds say what the rate means, with room for any seed's noise.
"""

from __future__ import annotations

import itertools
import random

import pytest

from kraft.config import ConfigError
from kraft.simulation import LinkConfig, SimNetwork

MESSAGES = 10_000


def network(seed: int = 1, **settings: object) -> SimNetwork:
    return SimNetwork(random.Random(seed), LinkConfig(**settings))  # type: ignore[arg-type]


def send_many(
    net: SimNetwork, count: int = MESSAGES, source: int = 1, destination: int = 2, every_ms: int = 1
) -> list[tuple[int, ...]]:
    """Send ``count`` messages on one link, one every ``every_ms``; their delivery times."""
    return [net.delivery_times(source, destination, i * every_ms) for i in range(count)]


# ---------------------------------------------------------------------------------------------
# Latency and order
# ---------------------------------------------------------------------------------------------
def test_latency_is_drawn_within_the_link_bounds() -> None:
    net = network(latency_ms=(3, 9))
    delays = [times[0] - 100 for times in (net.delivery_times(1, 2, 100) for _ in range(50))]
    assert all(3 <= d <= 9 for d in delays)
    fixed = network(latency_ms=(4, 4))
    assert {fixed.delivery_times(i, 9, 10)[0] for i in range(20)} == {14}


def test_a_link_without_reordering_is_fifo() -> None:
    """A message never arrives before one sent earlier on the same link, although latencies
    vary widely (a message drawn to arrive sooner waits for the one before it)."""
    net = network(latency_ms=(1, 50))
    arrivals = [times[0] for times in send_many(net, 2_000)]
    assert arrivals == sorted(arrivals)
    delays = [at - i for i, at in enumerate(arrivals)]
    assert min(delays) < 10 and max(delays) > 40  # the latencies did vary


def test_fifo_is_per_link() -> None:
    """A slow link holds back only its own messages: another link, the reverse one included,
    delivers sooner."""
    net = network(latency_ms=(1, 1))
    net.configure(latency_ms=(100, 100), links=[(1, 2)])
    assert net.delivery_times(1, 2, 0) == (100,)
    assert net.delivery_times(1, 3, 0) == (1,)
    assert net.delivery_times(2, 1, 0) == (1,)
    assert net.delivery_times(1, 2, 1) == (101,)


def test_reordering_breaks_fifo_and_stays_within_three_times_the_latency() -> None:
    net = network(latency_ms=(1, 10), reorder=0.3)
    arrivals = [times[0] for times in send_many(net, 2_000)]
    inversions = sum(1 for a, b in itertools.pairwise(arrivals) if b < a)
    assert inversions > 100
    assert all(1 <= at - i <= 3 * 10 + 1 for i, at in enumerate(arrivals))


# ---------------------------------------------------------------------------------------------
# Loss and duplication
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rate", [0.05, 0.3, 0.6])
def test_the_drop_rate_is_respected(rate: float) -> None:
    net = network(seed=7, drop=rate)
    lost = sum(1 for times in send_many(net) if times == ())
    assert abs(lost / MESSAGES - rate) < 0.02, lost


def test_no_drop_rate_loses_nothing() -> None:
    assert all(len(times) == 1 for times in send_many(network(seed=3)))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_duplicates_arrive_twice_at_the_duplicate_rate(rate: float) -> None:
    net = network(seed=9, duplicate=rate, latency_ms=(2, 6))
    deliveries = send_many(net)
    twice = [times for times in deliveries if len(times) == 2]
    assert abs(len(twice) / MESSAGES - rate) < 0.02
    assert all(len(times) in (1, 2) for times in deliveries)
    # The second copy is reordered: anywhere in [lo, 3 * hi + 1] after sending.
    assert all(2 <= t - i <= 19 for i, times in enumerate(deliveries) for t in times)


def test_the_same_seed_decides_the_same_fates() -> None:
    def fates(seed: int) -> list[tuple[int, ...]]:
        net = network(seed=seed, drop=0.2, duplicate=0.1, reorder=0.1, latency_ms=(1, 30))
        return send_many(net, 500)

    assert fates(5) == fates(5)
    assert fates(5) != fates(6)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [
        {"drop": 1.0},
        {"drop": -0.01},
        {"duplicate": 1.0},
        {"reorder": 3.0},
        {"latency_ms": (2, 1)},
        {"latency_ms": (-1, 1)},
    ],
)
def test_link_config_refuses_bad_settings(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        LinkConfig(**settings)  # type: ignore[arg-type]


def test_configure_changes_the_default_and_every_link_or_only_the_given_links() -> None:
    net = network()
    net.configure(drop=0.5, links=[(1, 2)])
    assert net.link(1, 2).drop == 0.5
    assert net.link(2, 1).drop == 0.0 and net.default.drop == 0.0
    net.configure(latency_ms=(7, 8))
    assert net.default.latency_ms == (7, 8)
    assert net.link(1, 2) == LinkConfig((7, 8), drop=0.5)  # its own drop stays
    assert net.link(3, 4) == LinkConfig((7, 8))
    with pytest.raises(ConfigError):
        net.configure(drop=1.5)


# ---------------------------------------------------------------------------------------------
# Partitions
# ---------------------------------------------------------------------------------------------
def test_partition_cuts_links_between_groups_only() -> None:
    net = network()
    net.partition([{1, 2}, {3}], [1, 2, 3])
    assert net.blocked == {(1, 3), (3, 1), (2, 3), (3, 2)}
    assert not net.is_blocked(1, 2) and net.is_blocked(3, 1)


def test_nodes_in_no_group_form_one_more_group() -> None:
    net = network()
    net.partition([{1}, {2, 3}], [1, 2, 3, 4, 5])
    assert not net.is_blocked(4, 5) and not net.is_blocked(5, 4)
    assert not net.is_blocked(2, 3)
    for a, b in [(1, 2), (1, 4), (2, 4), (3, 5), (5, 1)]:
        assert net.is_blocked(a, b) and net.is_blocked(b, a)
    assert len(net.blocked) == 2 * (1 * 2 + 1 * 2 + 2 * 2)


def test_a_single_group_isolates_it_from_everyone_else() -> None:
    net = network()
    net.partition([{2}], [1, 2, 3])
    assert net.blocked == {(1, 2), (2, 1), (3, 2), (2, 3)}


def test_partition_refuses_unknown_nodes() -> None:
    with pytest.raises(ConfigError, match="unknown nodes"):
        network().partition([{1}, {9}], [1, 2, 3])


def test_block_is_one_way() -> None:
    net = network()
    net.block([1], [2, 3])
    assert net.blocked == {(1, 2), (1, 3)}
    assert not net.is_blocked(2, 1) and not net.is_blocked(3, 1)
    net.block([2], [2])  # a node's link to itself: no such link
    assert (2, 2) not in net.blocked


def test_partitions_do_not_decide_delivery_times() -> None:
    """Cut links are checked when a message arrives (by the cluster), so sending on one
    still draws its fate: the random sequence does not depend on the partition."""
    cut, whole = network(seed=4), network(seed=4)
    cut.partition([{1}, {2}], [1, 2])
    assert send_many(cut, 100) == send_many(whole, 100)


def test_heal_restores_every_link_and_keeps_the_link_settings() -> None:
    net = network(drop=0.1)
    net.configure(latency_ms=(5, 5), links=[(2, 1)])
    net.partition([{1}, {2}], [1, 2, 3])
    net.block([3], [1])
    net.heal()
    assert net.blocked == set()
    assert net.default.drop == 0.1 and net.link(2, 1).latency_ms == (5, 5)


def test_uniform_is_the_default_until_a_link_is_blocked_or_set_apart() -> None:
    net = network(latency_ms=(2, 3))
    assert net.uniform() == LinkConfig(latency_ms=(2, 3))
    net.configure(drop=0.1)  # every link: still one config for all
    assert net.uniform() == LinkConfig(latency_ms=(2, 3), drop=0.1)
    net.block([1], [2])
    assert net.uniform() is None
    net.heal()
    assert net.uniform() is not None
    net.configure(latency_ms=(50, 60), links=[(1, 2)])
    assert net.uniform() is None
