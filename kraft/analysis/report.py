"""The report: ``report.md`` with tables and PNG plots, from aggregates already on the driver.

Nothing here touches Spark. :mod:`kraft.analysis.job` computes the aggregates (small: one row
per scenario, fault kind, histogram bucket, ...) and hands them over as :class:`ReportData`;
this module draws them with matplotlib and writes the Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft.analysis.safety import CHECKS
from kraft.analysis.session import require_matplotlib

__all__ = [
    "ROLE_COLORS",
    "ReportData",
    "format_table",
    "markdown_table",
    "parameter_rows",
    "write_report",
]

Row = Mapping[str, Any]

#: One color per role in the timeline (Down: the node is not running).
ROLE_COLORS: dict[str, str] = {
    "Leader": "#d62728",
    "Follower": "#2ca02c",
    "Candidate": "#ff7f0e",
    "Prospective": "#ffbb78",
    "Voted": "#9467bd",
    "Unattached": "#c7c7c7",
    "Resigned": "#8c564b",
    "Down": "#1f1f1f",
}

#: The per-scenario columns of the summary (printed and in the report), with their headers.
SUMMARY_COLUMNS: dict[str, str] = {
    "scenario": "scenario",
    "runs": "runs",
    "events": "events",
    "voters": "voters",
    "first_leader_p50_ms": "1st leader p50 ms",
    "elections_per_run": "elections/run",
    "runs_unavailable": "runs unavail.",
    "unavailable_max_ms": "max unavail. ms",
    "leader_p50_ms": "commit p50 ms",
    "leader_p99_ms": "commit p99 ms",
    "voters_p99_ms": "voters p99 ms",
    "records_per_s": "records/s",
    "violations": "violations",
}


@dataclass
class ReportData:
    """Everything the report shows, as plain rows."""

    source: str
    master: str
    runs: int
    events: int
    elapsed_s: float
    by_scenario: Sequence[Row]
    #: :func:`kraft.analysis.metrics.scenario_parameters`: what each scenario's runs were given.
    scenario_parameters: Sequence[Row]
    by_cluster_size: Sequence[Row]
    commit_latency: Sequence[Row]
    recovery_by_fault: Sequence[Row]
    longest_windows: Sequence[Row]
    violation_counts: dict[str, int]
    violations: Sequence[Row]
    election_histogram: Sequence[Row]
    commit_cdf: Sequence[Row]
    #: :func:`kraft.analysis.controller.controller_summary` (empty: no controller events).
    controller: Sequence[Row]
    timeline_run: str | None = None
    timeline: Sequence[Row] = ()
    timeline_faults: Sequence[Row] = ()
    tables: Mapping[str, str] = field(default_factory=dict)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else "-"
    return str(value)


def markdown_table(rows: Sequence[Row], columns: Mapping[str, str]) -> str:
    """``rows`` as a Markdown table of ``columns`` (key: header)."""
    lines = [
        "| " + " | ".join(columns.values()) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(row.get(key)) for key in columns) + " |" for row in rows]
    return "\n".join(lines)


def format_table(rows: Sequence[Row], columns: Mapping[str, str]) -> str:
    """``rows`` as an aligned plain-text table (the summary ``kraft analyze`` prints)."""
    cells = [list(columns.values())] + [[_cell(row.get(k)) for k in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    )


# ==============================================================================================
# What the scenarios were given
# ==============================================================================================
_PARAMETER_COLUMNS = {
    "scenario": "scenario",
    "runs": "runs",
    "voters": "voters",
    "observers": "observers",
    "election_timeout": "election timeout ms",
    "links": "links at the start",
    "network": "network faults set",
    "faults": "faults injected",
    "repairs": "repairs",
}


def _span(low: Any, high: Any, unit: str = "") -> str:
    """``low-high`` (or one value when they are equal), ``-`` when unknown."""
    if low is None or high is None:
        return "-"
    text = _cell(low) if low == high else f"{_cell(low)}-{_cell(high)}"
    return text + unit


def _rates(row: Row, prefix: str = "min_", top: str = "max_") -> list[str]:
    parts = []
    for rate in ("drop", "duplicate", "reorder"):
        low, high = row.get(f"{prefix}{rate}"), row.get(f"{top}{rate}")
        if high:  # a rate that stayed 0 (or was never set) says nothing
            parts.append(f"{rate} {_span(low, high)}")
    return parts


def parameter_rows(rows: Sequence[Row]) -> list[dict[str, str]]:
    """The rows of :func:`kraft.analysis.metrics.scenario_parameters` as the report's text."""
    table = []
    for row in rows:
        link = [_span(row.get("link_latency_lo_ms"), row.get("link_latency_hi_ms"), " ms")]
        link += _rates(row, "link_", "link_")
        network = _rates(row)
        if row.get("latency_hi_ms") is not None:
            network.append(
                f"latency {_span(row.get('latency_lo_ms'), row.get('latency_hi_ms'), ' ms')}"
            )
        injected = row.get("injected") or []
        table.append(
            {
                "scenario": str(row["scenario"]),
                "runs": _cell(row.get("runs")),
                "voters": _span(row.get("min_voters"), row.get("max_voters")),
                "observers": _span(row.get("min_observers"), row.get("max_observers")),
                "election_timeout": _span(
                    row.get("min_election_timeout_ms"), row.get("max_election_timeout_ms")
                ),
                "links": ", ".join(link),
                "network": ", ".join(network) or "none",
                "faults": ", ".join(
                    f"{i['fault']} {i['count']}" for i in injected if not i["repair"]
                )
                or "none",
                "repairs": ", ".join(f"{i['fault']} {i['count']}" for i in injected if i["repair"])
                or "none",
            }
        )
    return table


# ==============================================================================================
# Plots
# ==============================================================================================
def _plot_commit_cdf(data: ReportData, path: Path) -> bool:
    if not data.commit_cdf:
        return False
    plt = require_matplotlib()
    figure, axes = plt.subplots(figsize=(8, 5))
    for row in sorted(data.commit_cdf, key=lambda r: str(r["scenario"])):
        latencies = [max(float(q), 0.5) for q in row["quantiles"]]
        axes.step(latencies, row["fractions"], where="post", label=row["scenario"])
    axes.set_xscale("log")
    axes.set_xlabel("commit latency on the leader (simulated ms, log scale)")
    axes.set_ylabel("fraction of batches")
    axes.set_title("Commit latency CDF per scenario")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _plot_election_histogram(data: ReportData, path: Path) -> bool:
    if not data.election_histogram:
        return False
    plt = require_matplotlib()
    rows = sorted(data.election_histogram, key=lambda r: int(r["bucket_ms"]))
    width = (int(rows[1]["bucket_ms"]) - int(rows[0]["bucket_ms"])) if len(rows) > 1 else 50
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.bar(
        [int(r["bucket_ms"]) for r in rows],
        [int(r["elections"]) for r in rows],
        width=min(width, 50) * 0.9,
        align="edge",
        color="#1f77b4",
    )
    axes.set_xlabel("election latency: the winner's campaign (simulated ms)")
    axes.set_ylabel("elections")
    axes.set_title("Election latency")
    axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _plot_recovery(data: ReportData, path: Path) -> bool:
    rows = [r for r in data.recovery_by_fault if r.get("p50_ms") is not None]
    if not rows:
        return False
    plt = require_matplotlib()
    figure, axes = plt.subplots(figsize=(9, 4.5))
    names = [str(r["fault"]) for r in rows]
    for i, (key, color) in enumerate(
        (("p50_ms", "#2ca02c"), ("p90_ms", "#ff7f0e"), ("p99_ms", "#d62728"))
    ):
        axes.bar(
            [x + (i - 1) * 0.27 for x in range(len(rows))],
            [max(float(r[key]), 1.0) for r in rows],
            width=0.27,
            color=color,
            label=key.removesuffix("_ms"),
        )
    axes.set_xticks(range(len(rows)), names, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.set_ylabel("until a leader commits again (ms, log)")
    axes.set_title("Recovery time by fault kind")
    axes.grid(True, axis="y", which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _plot_timeline(data: ReportData, path: Path) -> bool:
    if not data.timeline:
        return False
    plt = require_matplotlib()
    end_ms = max(int(r["time_ms"]) for r in data.timeline) + 1
    if data.timeline_faults:
        end_ms = max(end_ms, max(int(r["time_ms"]) for r in data.timeline_faults) + 1)
    nodes = sorted({int(r["node"]) for r in data.timeline})
    figure, axes = plt.subplots(figsize=(10, 0.5 * len(nodes) + 1.8))
    for lane, node in enumerate(nodes):
        states = [r for r in data.timeline if int(r["node"]) == node]
        for current, following in zip(states, [*states[1:], None], strict=True):
            start = int(current["time_ms"])
            stop = int(following["time_ms"]) if following is not None else end_ms
            role = str(current["role"])
            axes.broken_barh(
                [(start, max(stop - start, 1))],
                (lane - 0.4, 0.8),
                color=ROLE_COLORS.get(role, "#7f7f7f"),
            )
    for fault in data.timeline_faults:
        axes.axvline(int(fault["time_ms"]), color="black", linewidth=0.6, linestyle=":")
        axes.text(
            int(fault["time_ms"]),
            len(nodes) - 0.4,
            str(fault["fault"]),
            rotation=90,
            fontsize=6,
            va="bottom",
        )
    axes.set_yticks(range(len(nodes)), [f"node {n}" for n in nodes])
    axes.set_xlim(0, end_ms)
    axes.set_xlabel("simulated ms")
    axes.set_title(f"Roles over time: {data.timeline_run}", pad=28)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ROLE_COLORS.values()]
    axes.legend(
        handles, list(ROLE_COLORS), fontsize=7, ncol=4, loc="upper left", bbox_to_anchor=(1.0, 1.0)
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


# ==============================================================================================
# report.md
# ==============================================================================================
_LATENCY_COLUMNS = {
    "scenario": "scenario",
    "voters": "voters",
    "scope": "on",
    "batches": "batches",
    "p50_ms": "p50 ms",
    "p90_ms": "p90 ms",
    "p99_ms": "p99 ms",
    "max_ms": "max ms",
}
_FAULT_COLUMNS = {
    "fault": "fault",
    "faults": "injected",
    "recovered": "leader commit after",
    "p50_ms": "p50 ms",
    "p90_ms": "p90 ms",
    "p99_ms": "p99 ms",
    "max_ms": "max ms",
}
_SIZE_COLUMNS = {
    "voters": "voters",
    "runs": "runs",
    "first_leader_p50_ms": "1st leader p50 ms",
    "elections_per_run": "elections/run",
    "commit_p99_median_ms": "median of runs' commit p99 ms",
    "records_per_s": "records/s",
}
_WINDOW_COLUMNS = {
    "run_id": "run",
    "start_ms": "from ms",
    "end_ms": "to ms",
    "duration_ms": "ms",
    "attempts": "appends tried",
    "open": "run ended in it",
}
#: The controller section's tables: metric, (what it measures, the column of events, the
#: column of measured ones). Definitions: kraft.analysis.controller.
_CONTROLLER_TABLES = {
    "time_to_fence": (
        "Time to fence: from a broker's crash to its `broker_fenced` (not measured when it "
        "restarted first)",
        "crashes",
        "fenced",
    ),
    "leader_election": (
        "Time to elect a partition leader: from a broker's crash or controlled shutdown to "
        "another leader of each partition it led",
        "partitions",
        "re-led",
    ),
    "write_latency": (
        "Controller write latency: from a call to its answer, by call (quantiles of the `ok` "
        "answers)",
        "calls",
        "ok",
    ),
    "failover": (
        "Controller failover: from a controller renouncing to the next one claiming",
        "renounces",
        "claimed again",
    ),
}


def _controller_section(rows: Sequence[Row]) -> list[str]:
    """The ``Controller`` section: one table per metric, or nothing for a log without
    controller events."""
    if not rows:
        return []
    out = ["## Controller\n", "Simulated ms, by scenario; definitions: docs/analysis.md.\n"]
    for metric, (title, events, measured) in _CONTROLLER_TABLES.items():
        columns = {"scenario": "scenario"}
        if metric == "write_latency":
            columns["op"] = "call"
        columns |= {
            "events": events,
            "measured": measured,
            "p50_ms": "p50 ms",
            "p99_ms": "p99 ms",
            "max_ms": "max ms",
        }
        chosen = [row for row in rows if row["metric"] == metric]
        out += [
            f"{title}:\n",
            (markdown_table(chosen, columns) if chosen else "None.") + "\n",
        ]
    return out


_VIOLATION_COLUMNS = {
    "check": "check",
    "run_id": "run",
    "time_ms": "ms",
    "node": "node",
    "detail": "detail",
}


def write_report(data: ReportData, out_dir: Path) -> Path:
    """Draw the plots into ``out_dir/plots`` and write ``out_dir/report.md``; its path."""
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    drawn = {
        name: draw(data, plots / f"{name}.png")
        for name, draw in (
            ("commit_latency_cdf", _plot_commit_cdf),
            ("election_latency", _plot_election_histogram),
            ("recovery_by_fault", _plot_recovery),
            ("role_timeline", _plot_timeline),
        )
    }

    def plot(name: str, caption: str) -> str:
        return f"![{caption}](plots/{name}.png)\n" if drawn[name] else "_(no data to plot)_\n"

    found = sum(data.violation_counts.values())
    scenarios = len(data.by_scenario)
    out: list[str] = [
        "# kraft simulation analysis\n",
        f"{data.runs} runs of {scenarios} scenarios, {data.events:,} events from "
        f"`{data.source}`, analysed on Spark `{data.master}` in {data.elapsed_s:.1f} s "
        f"({data.events / max(data.elapsed_s, 1e-9):,.0f} events/s). Times are simulated "
        "milliseconds. Definitions: docs/analysis.md.\n",
        "## Scenarios\n",
        "What each scenario's runs were given, to read the numbers below by: the cluster "
        "shape, the links every run started with (latency, and loss rates when not 0), what "
        "the `network` faults set them to (the range over the runs), and how many faults of "
        "each kind were injected over all the runs; the repairs (heal, resume) end faults "
        "and are counted apart.\n",
        markdown_table(parameter_rows(data.scenario_parameters), _PARAMETER_COLUMNS) + "\n",
        "## Summary by scenario\n",
        markdown_table(data.by_scenario, SUMMARY_COLUMNS) + "\n",
        "*1st leader*: when the first leader was elected; *runs unavail.*: runs with a gap of "
        "commits while the workload appended (below); *commit*: latency of data batches on the "
        "leader; *voters*: on every voter; *records/s*: committed records per simulated "
        "second; *violations*: found by the safety checks below.\n",
        "## Safety\n",
        ("No violation: " if found == 0 else f"**{found} violations**: ")
        + "every check below ran over every run.\n",
        markdown_table(
            [
                {"check": name, "what": what, "violations": data.violation_counts.get(name, 0)}
                for name, what in CHECKS.items()
            ],
            {"check": "check", "what": "asserts", "violations": "violations"},
        )
        + "\n",
    ]
    if data.violations:
        out += [
            f"The first {len(data.violations)}:\n",
            markdown_table(data.violations, _VIOLATION_COLUMNS) + "\n",
        ]
    out += [
        "## Commit latency\n",
        plot("commit_latency_cdf", "commit latency CDF"),
        "By scenario, cluster size (voters) and where the batch was delivered:\n",
        markdown_table(data.commit_latency, _LATENCY_COLUMNS) + "\n",
        "## Elections\n",
        plot("election_latency", "election latency histogram"),
        markdown_table(data.by_cluster_size, _SIZE_COLUMNS) + "\n",
        "## Recovery by fault kind\n",
        "From each injected fault to the next batch committed on a leader. A fault after "
        "which the run committed nothing more (its workload stopped) counts as injected, not "
        "recovered. The repairs (heal, resume) are not faults and are not listed.\n",
        plot("recovery_by_fault", "recovery time by fault kind"),
        markdown_table(data.recovery_by_fault, _FAULT_COLUMNS) + "\n",
        "## Unavailability\n",
        "The longest windows without a commit on a leader while the workload appended:\n",
        markdown_table(data.longest_windows, _WINDOW_COLUMNS) + "\n"
        if data.longest_windows
        else "None.\n",
        *_controller_section(data.controller),
        "## Role timeline\n",
    ]
    if data.timeline_run is not None:
        out += [
            f"Run `{data.timeline_run}` (the run with the most elections), every node's "
            "role over time; dotted lines are injected faults.\n",
            plot("role_timeline", "role timeline"),
        ]
    else:
        out.append("No run to show.\n")
    if data.tables:
        out += [
            "## Tables\n",
            'Parquet, under `tables/` (read with `spark.read.parquet("tables/NAME")`):\n',
        ]
        out += [f"- `{name}` — {what}" for name, what in data.tables.items()]
        out.append("")
    path = out_dir / "report.md"
    path.write_text("\n".join(out), encoding="utf-8")
    return path
