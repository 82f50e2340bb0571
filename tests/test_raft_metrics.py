"""``kraft.metrics``: Kafka's windowed stats, ``RaftMetrics`` on real clients, the Prometheus side.

The windowed stats are checked three ways: golden values worked out by hand from Kafka's
``SampledStat`` / ``Avg`` / ``Max`` / ``Rate`` rules, a hypothesis comparison against a
brute-force model that recomputes the windows from the whole event list, and the bounds any
window must respect (an event less than ``samples * window_ms`` old always counts; one
``(samples + 1) * window_ms`` old never does). ``RaftMetrics`` runs on a ``LocalCluster`` in
virtual time. Only the HTTP test uses a real socket (127.0.0.1, port 0, one scrape).
"""

from __future__ import annotations

import math
import re
import socket
import sys
import threading
import urllib.error
import urllib.request
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft.common.uuids import ZERO_UUID, uuid_to_text
from kraft.config import Endpoint
from kraft.errors import KraftError, TransportError
from kraft.metrics import (
    CURRENT_STATES,
    METRIC_DESCRIPTIONS,
    MetricsExtraMissingError,
    MetricWindow,
    PrometheusExporter,
    RaftMetrics,
    WindowedStat,
    WindowedTimeRatio,
    start_prometheus_server,
)
from kraft.raft.channel import MetricsRecorder
from kraft.raft.states import (
    NO_DEADLINE,
    CandidateState,
    FollowerState,
    ProspectiveState,
    ReplicaKey,
    ResignedState,
    UnattachedState,
)
from kraft.raft.voter_set import VoterSet
from kraft.testing import LocalCluster, ManualClock

W = 30_000  # Kafka's default metrics.sample.window.ms


# =================================================================================================
# WindowedStat: golden values
# =================================================================================================
def test_an_empty_window_reads_as_kafka_reports_it() -> None:
    stat = WindowedStat()
    assert math.isnan(stat.avg(0))
    assert math.isnan(stat.max(0))
    assert stat.sum(0) == 0.0
    assert stat.count(0) == 0
    assert stat.rate(0) == 0.0
    assert stat.rate(10 * W) == 0.0


def test_avg_and_max_over_one_sample() -> None:
    stat = WindowedStat()
    stat.record(10, 0)
    stat.record(20, 1_000)
    stat.record(-3, 2_000)
    assert stat.avg(2_000) == pytest.approx(9.0)
    assert stat.max(2_000) == 20
    assert stat.count(2_000) == 3


def test_max_of_negative_values_is_not_minus_infinity() -> None:
    stat = WindowedStat()
    stat.record(-5, 0)
    assert stat.max(0) == -5


def test_samples_roll_over_and_the_overlapping_sample_counts() -> None:
    # samples=2 keeps three slots: 0..29_999 | 30_000.. | 60_000..
    stat = WindowedStat()
    stat.record(1, 0)
    stat.record(2, 29_999)  # same sample: 29_999 - 0 < 30_000
    stat.record(3, 30_000)  # opens the second sample
    stat.record(4, 60_000)  # opens the third ("overlapping") sample
    # The first sample's last event (29_999) is 30_001 ms old: still counts.
    assert stat.avg(60_000) == pytest.approx(2.5)
    assert stat.max(60_000) == 4
    # At 89_999 the first sample's last event is 60_000 ms old: expired.
    assert stat.avg(89_999) == pytest.approx(3.5)
    # 90_000 reuses the first slot; the second sample (last event 30_000) expires now.
    stat.record(5, 90_000)
    assert stat.avg(90_000) == pytest.approx(4.5)
    assert stat.max(90_000) == 5
    assert stat.count(90_000) == 2
    # Long after: everything expired.
    assert math.isnan(stat.avg(150_000))
    assert math.isnan(stat.max(150_000))


def test_rate_divides_by_at_least_samples_minus_one_windows() -> None:
    stat = WindowedStat()
    stat.record(10, 0)
    assert stat.rate(0) == pytest.approx(10 / 30)  # 0 ms elapsed + one whole window
    assert stat.rate(15_000) == pytest.approx(10 / 45)  # 15 s + one whole window
    assert stat.rate(45_000) == pytest.approx(10 / 45)  # one full window already elapsed
    assert stat.rate(59_999) == pytest.approx(10 / 59.999)
    assert stat.rate(60_000) == 0.0  # the only sample expired


def test_rate_over_several_samples_starts_at_the_oldest_live_sample() -> None:
    stat = WindowedStat()
    stat.record(30, 0)
    stat.record(30, 20_000)  # the first sample's last event
    stat.record(30, 30_000)
    stat.record(30, 60_000)
    # All three samples live at 60_000: 120 records over 60 s.
    assert stat.rate(60_000) == pytest.approx(120 / 60)
    # At 80_000 the first expired: 60 records since 30_000.
    assert stat.rate(80_000) == pytest.approx(60 / 50)


def test_rate_per_unit() -> None:
    stat = WindowedStat(MetricWindow(samples=1, window_ms=1_000))
    stat.record(5, 0)
    stat.record(5, 500)
    assert stat.rate(500, per_ms=1.0) == pytest.approx(10 / 500)
    fresh = WindowedStat(MetricWindow(samples=1, window_ms=1_000))
    fresh.record(5, 0)
    assert fresh.rate(0, per_ms=1.0) == pytest.approx(5.0)  # never divided by less than 1 ms


@pytest.mark.parametrize("samples, window_ms", [(0, 1000), (2, 0), (-1, 5)])
def test_a_window_must_be_sensible(samples: int, window_ms: int) -> None:
    with pytest.raises(ValueError):
        MetricWindow(samples=samples, window_ms=window_ms)


# =================================================================================================
# WindowedStat against a brute-force model
# =================================================================================================
def model_window(
    events: list[tuple[int, int]], now: int, samples: int, window_ms: int
) -> tuple[list[int], int]:
    """The values a window holds at ``now``, and the start of its oldest live sample.

    Recomputed from scratch: cut the event list into samples (a sample opens at the first
    event ``window_ms`` or more after the current one opened), keep the last ``samples + 1``,
    drop those whose last event is ``samples * window_ms`` or more before ``now``.
    """
    cut: list[tuple[int, list[tuple[int, int]]]] = []
    for t, v in events:
        if not cut or t - cut[-1][0] >= window_ms:
            cut.append((t, []))
        cut[-1][1].append((t, v))
    live = [s for s in cut[-(samples + 1) :] if now - s[1][-1][0] < samples * window_ms]
    values = [v for _, sample in live for _, v in sample]
    oldest = min([now] + [start for start, _ in live])
    return values, oldest


@st.composite
def event_streams(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int]], list[int]]:
    samples = draw(st.integers(1, 3))
    window_ms = draw(st.integers(1, 50))
    gaps = draw(st.lists(st.integers(0, 3 * window_ms), min_size=0, max_size=60))
    values = draw(st.lists(st.integers(-1000, 1000), min_size=len(gaps), max_size=len(gaps)))
    t = 0
    events = []
    for gap, value in zip(gaps, values, strict=True):
        t += gap
        events.append((t, value))
    # Where to read after each event (how far past it).
    reads = draw(
        st.lists(st.integers(0, 5 * window_ms), min_size=len(events), max_size=len(events))
    )
    return samples, window_ms, events, reads


@settings(max_examples=300, deadline=None)
@given(event_streams())
def test_windowed_stat_matches_the_brute_force_model(
    case: tuple[int, int, list[tuple[int, int]], list[int]],
) -> None:
    samples, window_ms, events, reads = case
    stat = WindowedStat(MetricWindow(samples=samples, window_ms=window_ms))
    for n, ((t, v), ahead) in enumerate(zip(events, reads, strict=True)):
        stat.record(v, t)
        now = t + ahead
        values, oldest = model_window(events[: n + 1], now, samples, window_ms)
        assert stat.count(now) == len(values)
        assert stat.sum(now) == sum(values)
        if values:
            assert stat.avg(now) == pytest.approx(sum(values) / len(values))
            assert stat.max(now) == max(values)
        else:
            assert math.isnan(stat.avg(now))
            assert math.isnan(stat.max(now))
        elapsed = now - oldest
        elapsed += max(0, samples - 1 - elapsed // window_ms) * window_ms
        assert stat.rate(now) == pytest.approx(sum(values) / (max(elapsed, 1) / 1000))
        # The bounds of any window: recent events always count, old ones never.
        recent = [e for e in events[: n + 1] if now - e[0] < samples * window_ms]
        possible = [e for e in events[: n + 1] if now - e[0] < (samples + 1) * window_ms]
        assert len(recent) <= stat.count(now) <= len(possible)


# =================================================================================================
# WindowedTimeRatio (poll-idle-ratio-avg)
# =================================================================================================
def test_time_ratio_is_time_weighted_and_defaults_to_one() -> None:
    ratio = WindowedTimeRatio()
    assert ratio.ratio(0) == 1.0
    ratio.record(0.0, 0)  # the first record without a duration only marks the start
    assert ratio.ratio(0) == 1.0
    ratio.record(0.25, 1_000)  # 1000 ms, 250 idle
    assert ratio.ratio(1_000) == pytest.approx(0.25)
    ratio.record(1.0, 3_000)  # 2000 ms, all idle
    assert ratio.ratio(3_000) == pytest.approx(2_250 / 3_000)
    # Out of the window: back to the default.
    assert ratio.ratio(3_000 + 2 * W) == 1.0


def test_time_ratio_with_explicit_durations_clamps_bad_ratios() -> None:
    ratio = WindowedTimeRatio(default=0.5)
    ratio.record(0.5, 10, duration_ms=4.0)
    ratio.record(7.0, 10, duration_ms=4.0)  # clamped to 1.0
    ratio.record(float("nan"), 10, duration_ms=2.0)  # counted as busy
    ratio.record(0.5, 10, duration_ms=-1.0)  # ignored
    assert ratio.ratio(10) == pytest.approx((2.0 + 4.0 + 0.0) / 10.0)
    assert WindowedTimeRatio(default=0.5).ratio(0) == 0.5
    with pytest.raises(ValueError):
        WindowedTimeRatio(default=1.5)


# =================================================================================================
# RaftMetrics: gauges for every state
# =================================================================================================
DIRECTORY = uuid.UUID(int=0x1234)


def fake_client(
    state: Any,
    *,
    local_id: int | None = 1,
    voters: tuple[int, ...] = (1, 2, 3),
    log_end: tuple[int, int] = (0, 0),
) -> Any:
    """The little of a KafkaRaftClient the gauges read."""
    log = SimpleNamespace(log_end_offset=log_end[0], last_fetched_epoch=log_end[1])
    voter_set = VoterSet.from_static({v: Endpoint("localhost", 9990 + v) for v in voters})
    return SimpleNamespace(
        quorum=SimpleNamespace(
            state=state, voter_set=voter_set, is_voter=local_id is not None and local_id in voters
        ),
        local_id=local_id,
        local_directory_id=DIRECTORY,
        is_initialized=True,
        log=log,
    )


VOTED = ReplicaKey(2, DIRECTORY)
#: The voted-directory gauge's text when there is none.
NO_DIRECTORY = uuid_to_text(ZERO_UUID)

STATES = [
    # state, local id, current-state, current-leader, current-vote, voted directory
    (UnattachedState(4, None, None, None, NO_DEADLINE), 1, "unattached", -1, -1, NO_DIRECTORY),
    (UnattachedState(4, 7, 3, None, NO_DEADLINE), 1, "unattached", 3, -1, NO_DIRECTORY),
    (UnattachedState(4, 7, None, VOTED, NO_DEADLINE), 1, "voted", -1, 2, uuid_to_text(DIRECTORY)),
    (
        ProspectiveState(4, 7, 1, 3, None, frozenset({1, 2, 3}), NO_DEADLINE),
        1,
        "prospective",
        3,
        -1,
        NO_DIRECTORY,
    ),
    (
        ProspectiveState(4, 7, 1, None, ReplicaKey(2), frozenset({1, 2, 3}), NO_DEADLINE),
        1,
        "prospective-voted",
        -1,
        2,
        NO_DIRECTORY,
    ),
    (
        CandidateState(5, 7, 1, DIRECTORY, frozenset({1, 2, 3}), NO_DEADLINE, 1),
        1,
        "candidate",
        -1,
        1,
        uuid_to_text(DIRECTORY),
    ),
    (FollowerState(5, 7, 2, (), ReplicaKey(2), NO_DEADLINE), 1, "follower", 2, -1, NO_DIRECTORY),
    (FollowerState(5, 7, 2, (), None, NO_DEADLINE), 9, "observer", 2, -1, NO_DIRECTORY),
    (UnattachedState(5, 7, None, None, NO_DEADLINE), 9, "unattached", -1, -1, NO_DIRECTORY),
    (
        ResignedState(5, 7, 1, frozenset({1, 2, 3}), NO_DEADLINE, []),
        1,
        "unattached",
        1,
        -1,
        NO_DIRECTORY,
    ),
]


@pytest.mark.parametrize("state, local_id, current, leader, vote, directory", STATES)
def test_gauges_report_each_state_as_kafka_does(
    state: Any, local_id: int, current: str, leader: int, vote: int, directory: str
) -> None:
    metrics = RaftMetrics(ManualClock())
    metrics.bind(fake_client(state, local_id=local_id, log_end=(42, 3)))
    values = metrics.snapshot()
    assert values["current-state"] == current
    assert current in CURRENT_STATES
    assert values["current-leader"] == leader
    assert values["current-vote"] == vote
    assert values["current-vote-directory-id"] == directory
    assert values["current-epoch"] == state.epoch
    assert values["high-watermark"] == (
        -1 if state.high_watermark is None else state.high_watermark
    )
    assert (values["log-end-offset"], values["log-end-epoch"]) == (42, 3)
    assert values["number-of-voters"] == 3
    assert values["number-unknown-voter-connections"] == 0
    assert "number-of-observers" not in values  # the leader's alone


def test_snapshot_names_are_kafkas_and_documented() -> None:
    cluster = LocalCluster[bytes](3)
    metrics = RaftMetrics(cluster.clock)
    metrics.bind(cluster.nodes[1])
    values = metrics.snapshot()
    kafka = {
        "current-state",
        "current-leader",
        "current-vote",
        "current-vote-directory-id",
        "current-epoch",
        "high-watermark",
        "log-end-offset",
        "log-end-epoch",
        "number-unknown-voter-connections",
        "number-of-voters",
        "commit-latency-avg",
        "commit-latency-max",
        "election-latency-avg",
        "election-latency-max",
        "fetch-records-rate",
        "append-records-rate",
        "poll-idle-ratio-avg",
    }
    assert kafka <= set(values)
    assert set(values) <= set(METRIC_DESCRIPTIONS)
    assert values["poll-idle-ratio-avg"] == 1.0  # Kafka's TimeRatio default
    assert math.isnan(float(values["commit-latency-avg"]))


def test_an_unbound_recorder_reports_its_stats_only() -> None:
    clock = ManualClock()
    metrics = RaftMetrics(clock)
    assert isinstance(metrics, MetricsRecorder)
    metrics.record_commit_latency(4.0, 0)
    metrics.record_commit_latency(8.0, 0)
    values = metrics.snapshot()
    assert "current-state" not in values
    assert values["commit-latency-avg"] == 6.0
    assert values["commit-latency-max"] == 8.0
    clock.advance(2 * W)
    assert math.isnan(float(metrics.snapshot()["commit-latency-avg"]))


def test_snapshot_is_safe_while_the_poll_thread_records() -> None:
    metrics = RaftMetrics(ManualClock())
    recorded = 20_000
    errors: list[BaseException] = []

    def poll_thread() -> None:
        try:
            for n in range(recorded):
                metrics.record_append_records(1, n)
                metrics.record_commit_latency(float(n % 7), n)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=poll_thread, name="test-metrics-recorder")
    thread.start()
    try:
        while thread.is_alive():
            values = metrics.snapshot(now_ms=recorded)
            assert 0 <= int(values["append-records-total"]) <= recorded
    finally:
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert not errors
    assert metrics.snapshot()["append-records-total"] == recorded


# =================================================================================================
# RaftMetrics on real clients (LocalCluster, virtual time)
# =================================================================================================
ELECTION_TIMEOUT_MS = 20_000


def metered_cluster(voters: int = 3) -> tuple[LocalCluster[bytes], dict[int, RaftMetrics]]:
    """A LocalCluster whose clients report to a RaftMetrics each.

    LocalCluster has no metrics hook: each client's ``metrics`` recorder is replaced before
    the first poll (nothing is recorded before it: ``initialize`` of a 3-voter cluster starts
    no election).
    """
    cluster = LocalCluster[bytes](voters)
    metrics: dict[int, RaftMetrics] = {}
    for node_id, client in cluster.nodes.items():
        recorder = RaftMetrics(cluster.clock)
        client.metrics = recorder
        recorder.bind(client)
        metrics[node_id] = recorder
    return cluster, metrics


def test_after_an_election_the_leader_reports_it() -> None:
    cluster, metrics = metered_cluster()
    assert cluster.run_until(lambda: cluster.leader() is not None, 3 * ELECTION_TIMEOUT_MS)
    assert cluster.run_until(
        lambda: all(c.leader_id is not None for c in cluster.nodes.values()), 10_000
    )
    leader = cluster.leader()
    assert leader is not None
    epoch = cluster.nodes[leader].epoch
    values = metrics[leader].snapshot()
    assert values["current-state"] == "leader"
    assert values["current-leader"] == leader
    assert values["current-vote"] == leader
    assert values["current-epoch"] == epoch >= 1
    assert values["number-of-observers"] == 0
    latency = float(values["election-latency-avg"])
    assert latency >= 0 and not math.isnan(latency)
    assert float(values["election-latency-max"]) >= latency
    for node_id, recorder in metrics.items():
        if node_id == leader:
            continue
        follower = recorder.snapshot()
        assert follower["current-state"] == "follower"
        assert follower["current-leader"] == leader
        assert follower["current-epoch"] == epoch
        assert "number-of-observers" not in follower


def test_appends_show_in_commit_latency_and_record_rates() -> None:
    cluster, metrics = metered_cluster()
    assert cluster.run_until(lambda: cluster.leader() is not None, 3 * ELECTION_TIMEOUT_MS)
    leader = cluster.leader()
    assert leader is not None
    last = None
    for n in range(5):
        last = cluster.append([f"record-{n}-{i}".encode() for i in range(4)])
    assert last is not None
    target = last + 1
    assert cluster.run_until(
        lambda: all(
            log.high_watermark >= target and log.log_end_offset >= target
            for log in cluster.logs.values()
        ),
        10_000,
    )
    now = cluster.clock.now_ms()
    lead = metrics[leader].snapshot()
    assert not math.isnan(float(lead["commit-latency-avg"]))
    assert float(lead["commit-latency-max"]) >= float(lead["commit-latency-avg"]) >= 0
    assert float(lead["append-records-rate"]) > 0
    # 20 data records and the LeaderChange control record.
    assert lead["append-records-total"] == 21
    assert lead["fetch-records-total"] == 0
    assert lead["log-end-offset"] == cluster.logs[leader].log_end_offset == 21
    assert lead["log-end-epoch"] == cluster.nodes[leader].epoch
    assert lead["high-watermark"] == cluster.logs[leader].high_watermark
    for node_id, recorder in metrics.items():
        if node_id == leader:
            continue
        follower = recorder.snapshot(now)
        assert float(follower["fetch-records-rate"]) > 0
        assert follower["fetch-records-total"] == 21
        assert float(follower["append-records-rate"]) == 0.0
        assert math.isnan(float(follower["commit-latency-avg"]))
        assert follower["log-end-offset"] == 21
        assert follower["high-watermark"] == cluster.nodes[node_id].high_watermark
    # Two quiet windows later (fetches go on, empty), the windowed stats are empty again.
    cluster.run_for(2 * W)
    lead = metrics[leader].snapshot()
    assert lead["append-records-rate"] == 0.0
    assert math.isnan(float(lead["commit-latency-avg"]))
    assert lead["append-records-total"] == 21  # counters never go back


# =================================================================================================
# Prometheus
# =================================================================================================
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def prometheus() -> Any:
    """``prometheus_client`` (the metrics extra; a dev dependency)."""
    return pytest.importorskip("prometheus_client")


def scrape(prometheus: Any, exporter: PrometheusExporter) -> Samples:
    registry = prometheus.CollectorRegistry()
    registry.register(exporter)
    return parse(prometheus.generate_latest(registry).decode())


def parse(text: str) -> Samples:
    parser = pytest.importorskip("prometheus_client.parser")
    samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_the_exporter_names_metrics_the_prometheus_way(prometheus: Any) -> None:
    clock = ManualClock()
    metrics = RaftMetrics(clock)
    state = UnattachedState(3, 10, None, VOTED, NO_DEADLINE)
    metrics.bind(fake_client(state, log_end=(12, 3)))
    metrics.record_commit_latency(5.0, 0)
    metrics.record_append_records(6, 0)
    samples = scrape(prometheus, PrometheusExporter(metrics, node_id=1))
    node = (("node_id", "1"),)
    assert samples[("kraft_raft_commit_latency_avg", node)] == 5.0
    assert samples[("kraft_raft_commit_latency_max", node)] == 5.0
    assert math.isnan(samples[("kraft_raft_election_latency_avg", node)])
    assert samples[("kraft_raft_append_records_rate", node)] == pytest.approx(6 / 30)
    assert samples[("kraft_raft_append_records_total", node)] == 6.0
    assert samples[("kraft_raft_current_epoch", node)] == 3.0
    assert samples[("kraft_raft_high_watermark", node)] == 10.0
    assert samples[("kraft_raft_log_end_offset", node)] == 12.0
    assert samples[("kraft_raft_current_vote", node)] == 2.0
    assert samples[("kraft_raft_poll_idle_ratio_avg", node)] == 1.0
    for name in CURRENT_STATES:
        expected = 1.0 if name == "voted" else 0.0
        assert (
            samples[("kraft_raft_current_state", (("node_id", "1"), ("state", name)))] == expected
        )
    directory = uuid_to_text(DIRECTORY)
    assert (
        samples[
            (
                "kraft_raft_current_vote_directory_info",
                (("directory_id", directory), ("node_id", "1")),
            )
        ]
        == 1.0
    )
    assert ("kraft_raft_number_of_observers", node) not in samples


def test_the_exporter_namespace_and_duplicate_registration(prometheus: Any) -> None:
    metrics = RaftMetrics(ManualClock())
    samples = scrape(prometheus, PrometheusExporter(metrics, node_id="c1", namespace="meta"))
    assert ("meta_raft_commit_latency_avg", (("node_id", "c1"),)) in samples
    assert not any(name.startswith("meta_raft_current_state") for name, _ in samples)
    registry = prometheus.CollectorRegistry()
    registry.register(PrometheusExporter(metrics, node_id=1))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(PrometheusExporter(metrics, node_id=2))


def test_the_http_server_serves_one_scrape_and_stops_cleanly(prometheus: Any) -> None:
    cluster, metrics = metered_cluster()
    assert cluster.run_until(lambda: cluster.leader() is not None, 3 * ELECTION_TIMEOUT_MS)
    leader = cluster.leader()
    assert leader is not None
    before = set(threading.enumerate())
    server = start_prometheus_server(metrics[leader], "127.0.0.1", 0, node_id=leader)
    try:
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=10)
        assert missing.value.code == 404
        missing.value.close()
    finally:
        server()
    server.close()  # idempotent
    samples = parse(text)
    node = (("node_id", str(leader)),)
    assert samples[("kraft_raft_current_state", (*node, ("state", "leader")))] == 1.0
    assert samples[("kraft_raft_current_leader", node)] == float(leader)
    assert re.search(r"^kraft_raft_election_latency_max\{", text, re.MULTILINE)
    assert set(threading.enumerate()) <= before
    # The port is free again.
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=10)


def test_an_address_in_use_is_a_transport_error(prometheus: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
            start_prometheus_server(RaftMetrics(ManualClock()), "127.0.0.1", port, node_id=1)


def test_without_prometheus_client_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    metrics = RaftMetrics(ManualClock())
    with pytest.raises(MetricsExtraMissingError, match=re.escape("pip install 'kraft[metrics]'")):
        PrometheusExporter(metrics, node_id=1)
    with pytest.raises(KraftError, match="kraft\\[metrics\\]"):
        start_prometheus_server(metrics, "127.0.0.1", 0, node_id=1)
    with pytest.raises(ImportError):
        start_prometheus_server(metrics, "127.0.0.1", 0, node_id=1)
