"""The report's PNG plots (matplotlib, from the report's small per-second series) and the
``index.html`` that shows them with the headline figures."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def timeline(report: dict[str, Any], path: Path) -> None:
    """Throughput, latency and pauses per second on one time axis; faults as lines."""
    plt = _pyplot()
    figure, (rates, latency, paused) = plt.subplots(
        3, 1, sharex=True, figsize=(11, 8), height_ratios=[2, 2, 1]
    )
    per_second = report["throughput"]["per_second"]
    # Each second's count is drawn across that second: a step to the next one's start.
    seconds = [row["second"] for row in per_second]
    if seconds:
        seconds.append(seconds[-1] + 1)
    for what in ("sent", "confirmed", "received"):
        counts = [row[what] for row in per_second]
        rates.plot(seconds, counts + counts[-1:], label=what, drawstyle="steps-post")
    rates.set_ylabel("messages / s")
    rates.legend(loc="upper right")
    lat = report["latency"]["per_second"]
    for name in ("p50", "p99", "max"):
        latency.plot(
            [row["second"] for row in lat], [row[name] for row in lat], label=name, marker="."
        )
    if lat:
        latency.set_yscale("log")
    latency.set_ylabel("end-to-end latency (ms)")
    latency.legend(loc="upper right")
    for process, series in report["pauses"]["paused_per_second"].items():
        paused.bar(
            [second + 0.5 for second, _ in series],
            [value for _, value in series],
            width=1.0,
            alpha=0.6,
            label=process,
        )
    paused.set_ylabel("paused s / s")
    paused.set_xlabel("seconds since the run's first event")
    if report["pauses"]["paused_per_second"]:
        paused.legend(loc="upper right")
    for fault in report["faults"]:
        for axes in (rates, latency, paused):
            axes.axvline(fault["second"], color="red", linestyle="--", linewidth=0.8)
    figure.suptitle("Throughput, latency and flow-control pauses")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def latency_histogram(report: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.5))
    buckets = report["latency"]["histogram"]
    axes.bar(
        [b["from_ms"] for b in buckets],
        [b["count"] for b in buckets],
        width=[b["to_ms"] - b["from_ms"] for b in buckets],
        align="edge",
    )
    if buckets:
        axes.set_xscale("log")
    axes.set_xlabel("end-to-end latency (ms)")
    axes.set_ylabel("messages")
    axes.set_title("Latency histogram")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def rss(report: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for process, summary in report["rss"]["per_process"].items():
        series = summary["per_second"]
        axes.plot([s for s, _ in series], [b / MIB for _, b in series], label=process, marker=".")
    axes.set_xlabel("seconds since the run's first event")
    axes.set_ylabel("RSS (MiB)")
    axes.set_title("Resident memory per process")
    if report["rss"]["per_process"]:
        axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


PLOTS = {
    "timeline.png": timeline,
    "latency_histogram.png": latency_histogram,
    "rss.png": rss,
}


def draw(report: dict[str, Any], out_dir: Path) -> list[str]:
    """Every plot into ``out_dir``; their file names."""
    for name, plot in PLOTS.items():
        plot(report, out_dir / name)
    return list(PLOTS)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} ms"


def headline_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures a reader looks at first, as (label, value) text."""
    d = report["delivery"]
    lat = report["latency"]["overall"]
    rates = report["throughput"]
    rows = [
        (
            "attempted / confirmed / received",
            f"{d['attempted']:,} / {d['confirmed']:,} / {d['received']:,}",
        ),
        ("lost", f"{d['lost']:,}"),
        ("duplicated", f"{d['duplicated']:,}"),
        ("unexpected", f"{d['unexpected']:,}"),
        ("recovered", f"{d['recovered']:,}"),
        ("order violations", f"{d['order_violations']:,}"),
        (
            "sent / received per s",
            " / ".join(
                "-" if rates[k] is None else f"{rates[k]:,.0f}"
                for k in ("sent_per_s", "received_per_s")
            ),
        ),
        (
            "latency p50 / p99 / p99.9 / max",
            " / ".join(_ms(lat[k]) for k in ("p50", "p99", "p999", "max")),
        ),
        (
            "flow-control pauses",
            f"{report['pauses']['count']:,}, {report['pauses']['total_s']:.3f} s in total",
        ),
    ]
    for process, summary in report["rss"]["per_process"].items():
        rows.append((f"peak RSS of {process}", f"{summary['peak_bytes'] / MIB:,.1f} MiB"))
    if report["skipped"]["total"]:
        rows.append(("unreadable lines skipped", f"{report['skipped']['total']:,}"))
    return rows


def index(report: dict[str, Any], plots: list[str], path: Path) -> None:
    """An HTML page with the headline figures, the plots and a link to report.json."""
    rows = "\n".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(value)}</td></tr>"
        for label, value in headline_rows(report)
    )
    skipped = "".join(
        f"<li>{html.escape(name)}: {count:,} lines</li>"
        for name, count in report["skipped"]["files"].items()
    )
    images = "\n".join(
        f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' for name in plots
    )
    runs = html.escape(", ".join(report["runs"]))
    path.write_text(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>txbridge audit: {runs}</title>
<style>body{{font-family:sans-serif;margin:2em}}th{{text-align:left;padding-right:2em}}
img{{max-width:100%}}</style></head>
<body><h1>Audit of run {runs}</h1>
<p>{report["events"]:,} events from {len(report["processes"])} processes over
{report["window"]["seconds"]:.1f} s; every figure is in <a href="report.json">report.json</a>.</p>
<table>{rows}</table>
{f"<h2>Skipped lines</h2><ul>{skipped}</ul>" if skipped else ""}
{images}
</body></html>
""",
        encoding="utf-8",
    )
