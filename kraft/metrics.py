"""``RaftMetrics``: Kafka's ``raft-metrics`` for one ``KafkaRaftClient``, and a Prometheus exporter.

Theory of operation
    Kafka's ``KafkaRaftMetrics`` has two kinds of metric, and so does :class:`RaftMetrics`:

    - *Gauges* (state, epoch, leader, vote, high watermark, log end) are read when someone asks.
      The election state comes from the bound client's ``quorum.state``, read once per
      :meth:`RaftMetrics.snapshot` so that every gauge describes the same state object even
      while the poll thread moves on. The log end (offset and epoch) is *pushed*, as Kafka's
      ``updateLogEnd`` is: it is sampled on the poll thread whenever the client reports an
      append or a fetch, and after every poll the runtime driver reports; another thread never
      walks the log's epoch cache.
    - *Sensors* (commit and election latency, append and fetch rates, poll idle ratio) are
      pushed by the client through the :class:`~kraft.raft.channel.MetricsRecorder` calls and
      kept in :class:`WindowedStat`, a re-implementation of Kafka's ``SampledStat``: by default
      two samples of 30 s (``metrics.num.samples``, ``metrics.sample.window.ms``), plus the
      "overlapping" third sample Kafka keeps so that a window never loses the events of the
      sample that straddles its start. A sample opens at the first event once the current one
      is ``window_ms`` old; a sample whose last event is ``samples * window_ms`` old no longer
      counts. Avg and Max of no events are NaN, a Rate divides the windowed sum by the elapsed
      time but never by less than ``(samples - 1) * window_ms`` (Kafka's ``Rate.windowSize``).

    Time is always the ``now_ms`` handed in (the client's monotonic clock), so a test with a
    ``ManualClock`` gets the same numbers on every run. One difference from Kafka, on purpose:
    Kafka's ``measure`` resets obsolete samples as a side effect, so when a scrape happens moves
    later sample boundaries; here reading never changes a stat (the value read is Kafka's value
    at that instant), so concurrent readers cannot disturb each other or the numbers.

    ``record_*`` run on the poll thread thousands of times a second: each takes one
    uncontended lock and updates a few list slots. :meth:`RaftMetrics.snapshot` takes the same
    lock to read the stats, so it is safe from any thread (a Prometheus scrape, say).

    The Prometheus side (:class:`PrometheusExporter`, :func:`start_prometheus_server`) is a
    custom collector over :meth:`RaftMetrics.snapshot`; ``prometheus_client`` (the ``metrics``
    extra) is imported only when one is built. See ``docs/metrics.md``.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from kraft.common.clock import Clock
from kraft.common.uuids import ZERO_UUID, uuid_to_text
from kraft.errors import KraftError, TransportError
from kraft.raft.leader import LeaderState
from kraft.raft.states import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)

if TYPE_CHECKING:
    import uuid

    from kraft.raft.client import KafkaRaftClient

__all__ = [
    "CURRENT_STATES",
    "DEFAULT_WINDOW",
    "METRIC_DESCRIPTIONS",
    "METRIC_GROUP",
    "MetricWindow",
    "MetricsExtraMissingError",
    "MetricsServer",
    "PrometheusExporter",
    "RaftMetrics",
    "TransportMetricsSource",
    "WindowedStat",
    "WindowedTimeRatio",
    "start_prometheus_server",
]

logger = logging.getLogger(__name__)

#: Kafka's metric group for these metrics (``KafkaRaftMetrics`` with the prefix "raft").
METRIC_GROUP: Final = "raft-metrics"

#: Every value ``current-state`` takes, as Kafka reports it. A Resigned leader reports
#: "unattached" (Kafka's gauge has no case for it); only a follower that is not a voter
#: reports "observer".
CURRENT_STATES: Final = (
    "leader",
    "prospective",
    "prospective-voted",
    "candidate",
    "voted",
    "follower",
    "observer",
    "unattached",
)

#: What each metric means, with its unit (the snapshot's keys; kraft additions say so).
METRIC_DESCRIPTIONS: Final[dict[str, str]] = {
    "current-state": "The election state of this replica: " + ", ".join(CURRENT_STATES) + ".",
    "current-leader": "The id of the current leader; -1 when none is known.",
    "current-vote": "The id this replica voted for in the current epoch (its own as leader or "
    "candidate); -1 when it holds no vote.",
    "current-vote-directory-id": "The directory id of the replica voted for, in Kafka's Uuid "
    "text form; the zero Uuid when none.",
    "current-epoch": "The current quorum epoch.",
    "high-watermark": "The high watermark this replica knows; -1 when unknown.",
    "log-end-offset": "The offset the next record appended to the log will take.",
    "log-end-epoch": "The epoch of the last batch in the log (or the epoch a new leader started).",
    "number-unknown-voter-connections": "Voters whose connection information is not known; "
    "0 with a static voter set.",
    "number-of-voters": "The number of voters in the voter set.",
    "number-of-observers": "Observers the leader is tracking (reported by the leader only).",
    "commit-latency-avg": "Average milliseconds from appending a batch as leader to its "
    "commit, over the sample window.",
    "commit-latency-max": "Maximum milliseconds from appending a batch as leader to its "
    "commit, over the sample window.",
    "election-latency-avg": "Average milliseconds an election this replica took part in "
    "lasted, over the sample window.",
    "election-latency-max": "Maximum milliseconds an election this replica took part in "
    "lasted, over the sample window.",
    "fetch-records-rate": "Records per second this replica appended from fetches (as a "
    "follower or observer), over the sample window.",
    "append-records-rate": "Records per second this replica appended as leader, over the "
    "sample window.",
    "poll-idle-ratio-avg": "Fraction of the Raft I/O thread's time spent waiting for work, "
    "over the sample window; 1.0 before anything is recorded.",
    "append-records-total": "Records appended as leader since start (a kraft addition: a "
    "counter for Prometheus).",
    "fetch-records-total": "Records appended from fetches since start (a kraft addition: a "
    "counter for Prometheus).",
    # The listener's limits (kraft additions; Kafka's socket-server-metrics count differently).
    "connections-refused-max-connections-total": "Inbound connections refused since start "
    "because max_connections were open.",
    "connections-refused-per-ip-total": "Inbound connections refused since start because "
    "max_connections_per_ip were open from their address.",
    "connections-closed-idle-total": "Inbound connections closed since start after "
    "connections_max_idle_ms without a byte.",
    "connections-closed-slow-request-total": "Inbound connections closed since start because a "
    "request stayed incomplete for a request timeout (slowloris).",
    "connections-closed-request-bytes-total": "Inbound connections closed since start because "
    "their partial request did not fit in queued_max_request_bytes.",
    "inbound-connections": "Connections peers have open to this node's listener.",
    "partial-request-bytes": "Bytes held now in partially received requests, over all "
    "inbound connections.",
    "corruptions-found-total": "Corrupt batches or snapshots this replica found where it read "
    "them and set aside, since start (a kraft addition).",
    "repairs-completed-total": "Times the log, under repair, fetched back as far as it held "
    "before setting data aside, since start (a kraft addition).",
}

_EXTRA_HINT: Final = "install the extra: pip install 'kraft[metrics]'"


# =================================================================================================
# Windowed stats (Kafka's SampledStat, Avg, Max, WindowedSum, Rate)
# =================================================================================================
@dataclass(frozen=True, slots=True)
class MetricWindow:
    """How much history a windowed stat keeps (Kafka's ``MetricConfig``)."""

    #: ``metrics.num.samples``: complete samples a measurement covers.
    samples: int = 2
    #: ``metrics.sample.window.ms``: how long one sample stays open.
    window_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"a window needs at least one sample, not {self.samples}")
        if self.window_ms < 1:
            raise ValueError(f"a sample window must be at least 1 ms, not {self.window_ms}")


#: Kafka's defaults: two samples of 30 seconds.
DEFAULT_WINDOW: Final = MetricWindow()


class WindowedStat:
    """One stream of values, sampled in time windows: Avg, Max, Sum, Count and Rate of it.

    Kafka keeps one ``SampledStat`` per statistic; they roll over identically when fed the same
    events, so one object here keeps sum, count and max per sample and serves them all.
    ``record`` is O(1) and allocates nothing but the float it adds; the readers are pure.
    """

    __slots__ = (
        "_count",
        "_current",
        "_expire_ms",
        "_last",
        "_max",
        "_samples",
        "_start",
        "_sum",
        "_used",
        "_window_ms",
    )

    def __init__(self, window: MetricWindow = DEFAULT_WINDOW) -> None:
        # One slot more than the window's samples: Kafka's "overlapping sample".
        slots = window.samples + 1
        self._samples = window.samples
        self._window_ms = window.window_ms
        self._expire_ms = window.samples * window.window_ms
        self._start = [0] * slots
        self._last = [0] * slots
        self._count = [0] * slots
        self._sum = [0.0] * slots
        self._max = [-math.inf] * slots
        self._current = 0
        #: Slots that hold a sample (Kafka's list of samples grows to ``slots``, then cycles).
        self._used = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value``, observed at ``now_ms``."""
        i = self._current
        if self._used == 0:
            self._used = 1
            self._open(i, now_ms)
        elif now_ms - self._start[i] >= self._window_ms:
            i = (i + 1) % len(self._start)
            self._current = i
            if i >= self._used:
                self._used = i + 1
            self._open(i, now_ms)
        self._count[i] += 1
        self._sum[i] += value
        self._max[i] = max(self._max[i], value)
        self._last[i] = now_ms

    def _open(self, i: int, now_ms: int) -> None:
        self._start[i] = now_ms
        self._count[i] = 0
        self._sum[i] = 0.0
        self._max[i] = -math.inf

    def _live(self, now_ms: int) -> Iterator[int]:
        """The slots that still count at ``now_ms`` (Kafka purges the others on measure)."""
        expire = self._expire_ms
        last = self._last
        return (i for i in range(self._used) if now_ms - last[i] < expire)

    def count(self, now_ms: int) -> int:
        """How many values the window holds."""
        return sum(self._count[i] for i in self._live(now_ms))

    def sum(self, now_ms: int) -> float:
        """The sum of the values in the window (Kafka's ``WindowedSum``); 0.0 when empty."""
        return sum((self._sum[i] for i in self._live(now_ms)), 0.0)

    def avg(self, now_ms: int) -> float:
        """The mean of the values in the window (Kafka's ``Avg``); NaN when empty."""
        total = 0.0
        count = 0
        for i in self._live(now_ms):
            total += self._sum[i]
            count += self._count[i]
        return total / count if count else math.nan

    def max(self, now_ms: int) -> float:
        """The largest value in the window (Kafka's ``Max``); NaN when empty."""
        best = -math.inf
        count = 0
        for i in self._live(now_ms):
            best = max(best, self._max[i])
            count += self._count[i]
        return float(best) if count else math.nan

    def rate(self, now_ms: int, per_ms: float = 1000.0) -> float:
        """The windowed sum per ``per_ms`` (per second by default): Kafka's ``Rate``.

        The elapsed time runs from the start of the oldest sample that still counts, and is
        never taken as less than ``samples - 1`` whole windows (plus what passed of the current
        one), so a burst right after start does not read as a huge rate; 0.0 when empty.
        """
        total = 0.0
        oldest = now_ms
        for i in self._live(now_ms):
            total += self._sum[i]
            oldest = min(oldest, self._start[i])
        elapsed = now_ms - oldest
        full_windows = elapsed // self._window_ms
        if full_windows < self._samples - 1:
            elapsed += (self._samples - 1 - full_windows) * self._window_ms
        return total / (max(elapsed, 1) / per_ms)


class WindowedTimeRatio:
    """The fraction of time spent idle, over the sample window (``poll-idle-ratio-avg``).

    Each record is one loop iteration: the fraction of it spent waiting, and how long it took.
    The ratio is idle time over elapsed time, both summed over the window, so a long idle wait
    weighs more than many short busy turns (Kafka's ``TimeRatio`` is time-weighted too). When
    the caller gives no duration, the time since the previous record stands for it: the first
    record then only sets the start, as Kafka's ``TimeRatio`` discards its first value.
    ``default`` (Kafka: 1.0) is the ratio before any time has been recorded.
    """

    __slots__ = ("_default", "_idle", "_previous_ms", "_total")

    def __init__(self, window: MetricWindow = DEFAULT_WINDOW, default: float = 1.0) -> None:
        if not 0.0 <= default <= 1.0:
            raise ValueError(f"a default ratio must be within [0, 1], not {default}")
        self._default = default
        self._idle = WindowedStat(window)
        self._total = WindowedStat(window)
        self._previous_ms: int | None = None

    def record(self, ratio: float, now_ms: int, duration_ms: float | None = None) -> None:
        """One iteration ending at ``now_ms`` spent ``ratio`` of its time idle."""
        previous, self._previous_ms = self._previous_ms, now_ms
        if duration_ms is None:
            if previous is None:
                return
            duration_ms = max(0, now_ms - previous)
        elif not duration_ms >= 0.0:  # negative or NaN: nothing to weigh
            return
        # Clamp rather than raise: this runs on the Raft I/O thread.
        if not ratio >= 0.0:  # also NaN
            ratio = 0.0
        elif ratio > 1.0:
            ratio = 1.0
        self._idle.record(ratio * duration_ms, now_ms)
        self._total.record(duration_ms, now_ms)

    def ratio(self, now_ms: int) -> float:
        """Idle time over elapsed time in the window; ``default`` when no time was recorded."""
        total = self._total.sum(now_ms)
        if total <= 0.0:
            return self._default
        return min(1.0, self._idle.sum(now_ms) / total)


# =================================================================================================
# RaftMetrics
# =================================================================================================
def _uuid_text(value: uuid.UUID | None) -> str:
    return uuid_to_text(ZERO_UUID if value is None else value)


class TransportMetricsSource(Protocol):
    """What a transport reports of its limits, by metric name (``TrioNetworkChannel`` is one);
    called from any thread."""

    def transport_metrics(self) -> dict[str, int]: ...


class RaftMetrics:
    """Kafka's ``raft-metrics`` for one replica: a :class:`~kraft.raft.channel.MetricsRecorder`
    to hand to ``KafkaRaftClient(metrics=...)``, and the gauges of the client it is bound to
    (and of the transport, once :meth:`bind_transport` is called).

    ``clock`` must be the client's clock: the stats are read at ``clock.now_ms()``.
    """

    def __init__(self, clock: Clock, *, window: MetricWindow = DEFAULT_WINDOW) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._client: KafkaRaftClient[Any] | None = None
        self._transport: TransportMetricsSource | None = None
        self._commit_latency = WindowedStat(window)
        self._election_latency = WindowedStat(window)
        self._fetch_records = WindowedStat(window)
        self._append_records = WindowedStat(window)
        self._poll_idle = WindowedTimeRatio(window, default=1.0)
        self._fetch_records_total = 0
        self._append_records_total = 0
        self._corruptions_found_total = 0
        self._repairs_completed_total = 0
        #: (log end offset, log end epoch) as last sampled on the poll thread.
        self._log_end: tuple[int, int] = (0, 0)

    # -- wiring --------------------------------------------------------------------------------
    def bind(self, client: KafkaRaftClient[Any]) -> None:
        """Read the gauges from ``client``. Call it before the client is polled elsewhere:
        it samples the log end once (later samples are taken on the poll thread)."""
        self._client = client
        self._sample_log_end()

    def bind_transport(self, transport: TransportMetricsSource) -> None:
        """Report ``transport``'s connection limits too (docs/metrics.md)."""
        self._transport = transport

    @property
    def client(self) -> KafkaRaftClient[Any] | None:
        """The client the gauges are read from, if bound."""
        return self._client

    def _sample_log_end(self) -> None:
        client = self._client
        if client is not None and client.is_initialized:
            log = client.log
            self._log_end = (log.log_end_offset, log.last_fetched_epoch)

    # -- MetricsRecorder (called on the poll thread) -------------------------------------------
    def record_append_records(self, count: int, now_ms: int) -> None:
        with self._lock:
            self._append_records.record(count, now_ms)
            self._append_records_total += count
        self._sample_log_end()

    def record_fetch_records(self, count: int, now_ms: int) -> None:
        with self._lock:
            self._fetch_records.record(count, now_ms)
            self._fetch_records_total += count
        self._sample_log_end()

    def record_commit_latency(self, latency_ms: float, now_ms: int) -> None:
        with self._lock:
            self._commit_latency.record(latency_ms, now_ms)

    def record_election_latency(self, latency_ms: float, now_ms: int) -> None:
        with self._lock:
            self._election_latency.record(latency_ms, now_ms)

    def record_corruption_found(self, now_ms: int) -> None:
        with self._lock:
            self._corruptions_found_total += 1

    def record_repair_completed(self, now_ms: int) -> None:
        with self._lock:
            self._repairs_completed_total += 1

    # -- from the runtime ------------------------------------------------------------------------
    def record_poll_idle_ratio(
        self, ratio: float, now_ms: int, *, duration_ms: float | None = None
    ) -> None:
        """One turn of the Raft I/O loop ended at ``now_ms`` having waited ``ratio`` of it.

        ``duration_ms`` is how long the turn took; without it, the time since the previous
        call stands for it (exact on average, since a turn shorter than a millisecond spans a
        millisecond tick with a probability equal to its length). Call it on the poll thread:
        it also samples the log end.
        """
        with self._lock:
            self._poll_idle.record(ratio, now_ms, duration_ms)
        self._sample_log_end()

    # -- reading ----------------------------------------------------------------------------------
    def snapshot(self, now_ms: int | None = None) -> dict[str, float | int | str]:
        """Every metric by its Kafka name, at ``now_ms`` (default: the clock's now).

        The gauges are present once a client is bound (``number-of-observers`` only while it
        leads). Safe from any thread.
        """
        now = self._clock.now_ms() if now_ms is None else now_ms
        values: dict[str, float | int | str] = {}
        client = self._client
        if client is not None:
            self._read_gauges(client, values)
        with self._lock:
            values["commit-latency-avg"] = self._commit_latency.avg(now)
            values["commit-latency-max"] = self._commit_latency.max(now)
            values["election-latency-avg"] = self._election_latency.avg(now)
            values["election-latency-max"] = self._election_latency.max(now)
            values["fetch-records-rate"] = self._fetch_records.rate(now)
            values["append-records-rate"] = self._append_records.rate(now)
            values["poll-idle-ratio-avg"] = self._poll_idle.ratio(now)
            values["append-records-total"] = self._append_records_total
            values["fetch-records-total"] = self._fetch_records_total
            values["corruptions-found-total"] = self._corruptions_found_total
            values["repairs-completed-total"] = self._repairs_completed_total
        transport = self._transport
        if transport is not None:
            values.update(transport.transport_metrics())
        return values

    def _read_gauges(
        self, client: KafkaRaftClient[Any], values: dict[str, float | int | str]
    ) -> None:
        # One read of the state object: every gauge below describes the same state, whatever
        # transition the poll thread makes meanwhile.
        state = client.quorum.state
        local_id = client.local_id
        voters = client.quorum.voter_set  # the latest in the log (KIP-853); one read
        leader: int | None = None
        voted_id = -1
        voted_directory = _uuid_text(None)
        if isinstance(state, LeaderState):
            current = "leader"
            leader = local_id
        elif isinstance(state, CandidateState):
            current = "candidate"
        elif isinstance(state, ProspectiveState):
            current = "prospective" if state.voted_key is None else "prospective-voted"
            leader = state.leader_id
        elif isinstance(state, FollowerState):
            current = "follower" if client.quorum.is_voter else "observer"
            leader = state.leader_id
        elif isinstance(state, UnattachedState):
            current = "unattached" if state.voted_key is None else "voted"
            leader = state.leader_id
        else:
            # Kafka's gauge has no case for Resigned: it falls through to "unattached".
            current = "unattached"
            if isinstance(state, ResignedState):
                leader = local_id
        if isinstance(state, LeaderState | CandidateState):
            voted_id = -1 if local_id is None else local_id
            voted_directory = _uuid_text(client.local_directory_id)
        elif isinstance(state, UnattachedState | ProspectiveState) and state.voted_key is not None:
            voted_id = state.voted_key.id
            voted_directory = _uuid_text(state.voted_key.directory_id)
        high_watermark = state.high_watermark
        log_end_offset, log_end_epoch = self._log_end
        values["current-state"] = current
        values["current-leader"] = -1 if leader is None else leader
        values["current-vote"] = voted_id
        values["current-vote-directory-id"] = voted_directory
        values["current-epoch"] = state.epoch
        values["high-watermark"] = -1 if high_watermark is None else high_watermark
        values["log-end-offset"] = log_end_offset
        values["log-end-epoch"] = log_end_epoch
        # A voter whose listeners are unknown (a static voter set always has them).
        values["number-unknown-voter-connections"] = sum(not n.endpoints for n in voters.nodes())
        values["number-of-voters"] = len(voters)
        if isinstance(state, LeaderState):
            values["number-of-observers"] = len(state.observer_states)


# =================================================================================================
# Prometheus
# =================================================================================================
class MetricsExtraMissingError(KraftError, ImportError):
    """``prometheus_client`` is not installed: the message names the extra to install."""


def _prometheus() -> Any:
    """``prometheus_client``, or :class:`MetricsExtraMissingError`."""
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:
        raise MetricsExtraMissingError(
            f"the Prometheus exporter needs prometheus_client: {_EXTRA_HINT}"
        ) from exc
    return prometheus_client


#: Snapshot keys exported as counters (Prometheus appends ``_total`` itself).
_COUNTERS: Final = {
    key: key.removesuffix("-total").replace("-", "_")
    for key in METRIC_DESCRIPTIONS
    if key.endswith("-total")
}
#: Snapshot keys exported specially (a labelled state gauge, an info metric).
_SPECIAL: Final = {"current-state", "current-vote-directory-id"}


class PrometheusExporter:
    """A ``prometheus_client`` custom collector over one :class:`RaftMetrics`.

    Each metric is named ``<namespace>_raft_<kafka name with underscores>`` (for example
    ``kraft_raft_commit_latency_avg``) and labelled ``node_id``. ``current-state`` is the gauge
    ``<ns>_raft_current_state{node_id, state}``: 1 for the current state, 0 for the others;
    ``current-vote-directory-id`` is the info metric ``<ns>_raft_current_vote_directory_info``.
    Register it in a registry of your own (``registry.register(exporter)``); two exporters with
    the same namespace cannot share one registry.
    """

    def __init__(self, metrics: RaftMetrics, *, node_id: int | str, namespace: str = "kraft"):
        self._core = _prometheus().core
        self.metrics = metrics
        self.node_id = str(node_id)
        self.prefix = f"{namespace}_raft_" if namespace else "raft_"

    def _name(self, key: str) -> str:
        return self.prefix + _COUNTERS.get(key, key.replace("-", "_"))

    def describe(self) -> list[Any]:
        """The metric families without samples, so a registry can refuse duplicate names."""
        return list(self._families(None))

    def collect(self) -> Iterator[Any]:
        """The metric families with the current values (called on every scrape)."""
        return self._families(self.metrics.snapshot())

    def _families(self, values: dict[str, float | int | str] | None) -> Iterator[Any]:
        core = self._core
        node = [self.node_id]
        state = core.GaugeMetricFamily(
            self._name("current-state"),
            METRIC_DESCRIPTIONS["current-state"],
            labels=["node_id", "state"],
        )
        directory = core.InfoMetricFamily(
            self.prefix + "current_vote_directory",
            METRIC_DESCRIPTIONS["current-vote-directory-id"],
            labels=["node_id"],
        )
        if values is not None and "current-state" in values:
            current = values["current-state"]
            for name in CURRENT_STATES:
                state.add_metric([self.node_id, name], 1.0 if name == current else 0.0)
            directory.add_metric(node, {"directory_id": str(values["current-vote-directory-id"])})
        yield state
        yield directory
        for key, description in METRIC_DESCRIPTIONS.items():
            if key in _SPECIAL:
                continue
            if key in _COUNTERS:
                family = core.CounterMetricFamily(self._name(key), description, labels=["node_id"])
            else:
                family = core.GaugeMetricFamily(self._name(key), description, labels=["node_id"])
            if values is not None:
                value = values.get(key)
                if value is None:
                    continue  # not reported now (an unbound client, an observer count off-lead)
                family.add_metric(node, float(value))
            yield family


class _QuietHandler(WSGIRequestHandler):
    """Logs requests at debug level, and gives up on a client silent for 10 s."""

    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("metrics endpoint: " + format, *args)


class MetricsServer:
    """A running ``/metrics`` endpoint. Call it (or :meth:`close`) to stop it."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self._closed = False
        self._lock = threading.Lock()
        address = httpd.server_address
        self.host: str = str(address[0])
        #: The port it listens on (the one the system chose, when asked for port 0).
        self.port: int = int(address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving, close the socket and join the server thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    __call__ = close

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _only_metrics_path(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") in ("/", "/metrics"):
            return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: the metrics are at /metrics\n"]

    return serve


def start_prometheus_server(
    metrics: RaftMetrics,
    host: str,
    port: int,
    *,
    node_id: int | str,
    namespace: str = "kraft",
) -> MetricsServer:
    """Serve ``metrics`` for Prometheus at ``http://host:port/metrics`` on a thread of its own.

    The exporter is registered in a registry of its own, never the global one. Port 0 lets the
    system choose (read it from ``.port``). Returns the server: call it to stop.
    :class:`~kraft.errors.TransportError` when the address cannot be bound.
    """
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry(auto_describe=True)
    registry.register(PrometheusExporter(metrics, node_id=node_id, namespace=namespace))
    app = _only_metrics_path(prometheus.make_wsgi_app(registry))
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
            0
        ][0]

        class _Server(WSGIServer):
            address_family = family

        httpd = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise TransportError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"kraft-{node_id}-metrics",
        daemon=True,
    )
    thread.start()
    server = MetricsServer(httpd, thread)
    logger.info("serving Raft metrics of node %s at %s", node_id, server.url)
    return server
