#!/usr/bin/env python3
"""Plots a sluice-demo report: consumer-group lag (records, and sluice-lag's
exact time lag), processor instances and throughput over the run, the picture
an SRE looks at first.

Usage: plot_demo.py REPORT.json OUT.png
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(report_path, out_path):
    report = json.load(open(report_path))
    timeline = report["timeline"]
    if not timeline:
        sys.exit(f"{report_path}: empty timeline")
    t = [s["t"] for s in timeline]
    settings = report["settings"]
    fig, (lag, procs, rate) = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    # The trigger the autoscaler ran: a time-lag objective (sluice-lag's scaler) or KEDA's
    # lag threshold per processor (the report's autoscaler line names it).
    objective = re.search(r"TimeLag \{ target_seconds: ([0-9.]+)", report.get("autoscaler", ""))
    trigger = (f"time-lag objective {float(objective.group(1)):g} s" if objective
               else f"lag threshold {settings['lag_threshold']:,} per processor")
    cpu = settings.get("processor_cpu_millis")
    fig.suptitle(
        f"{report['id']}: {settings['rate']:,} tx/s for {settings['seconds']} s, {trigger}"
        + (f", processors at {cpu}m CPU" if cpu else "")
    )
    lag.plot(t, [s["lag"] for s in timeline], color="tab:red", label="group lag (records)")
    if not objective:
        lag.axhline(settings["lag_threshold"], color="grey", linestyle=":", label="lag threshold (1 processor)")
    lag.set_ylabel("group lag (records)")
    lag.legend(loc="upper left")
    # sluice-lag's time lag: the age of the oldest unconsumed record (a gap where unknown).
    seconds = [s.get("lag_seconds") for s in timeline]
    behind = lag.twinx()
    behind.plot(t, [float("nan") if v is None else v for v in seconds], color="tab:purple", linewidth=1,
                label="time lag (s, sluice-lag)")
    behind.set_ylabel("time lag (s)")
    if objective:
        behind.axhline(float(objective.group(1)), color="tab:purple", linestyle=":", label="time-lag objective")
    behind.set_ylim(bottom=0)
    behind.legend(loc="upper right")
    procs.step(t, [s["processors"] for s in timeline], where="post", color="tab:blue")
    procs.set_ylabel("processors")
    procs.set_ylim(0, settings["max_processors"] + 1)
    rate.plot(t, [s["records_per_sec"] for s in timeline], label="records processed / s", color="tab:green")
    rate.plot(t, [s["chain_tx_per_sec"] for s in timeline], label="chain tx / s", color="tab:orange", alpha=0.7)
    rate.set_ylabel("per second")
    rate.set_xlabel("seconds since start")
    rate.legend(loc="upper right")
    stop = settings["seconds"]
    for ax in (lag, procs, rate):
        ax.axvline(stop, color="black", linestyle="--", linewidth=0.8)
        ax.grid(alpha=0.3)
    lag.annotate("traffic stops", (stop, 0), xytext=(4, 4), textcoords="offset points", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
