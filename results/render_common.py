"""Helpers every results/README.md block and plot shares (render.py and its block modules)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def us(ns):
    return f"{ns / 1e3:,.2f} µs" if ns < 1e6 else f"{ns / 1e6:,.2f} ms"


def ms(ns):
    return f"{ns / 1e6:,.2f} ms"


def n0(x):
    return f"{x:,.0f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def source(name, report):
    m = report["machine"]
    return (
        f"Source: `{name}` (commit `{report['git_commit']}`, {report['profile']} build, "
        f"{m['cores']} × {m['cpu_model']}, {m['memory_gib']} GiB)."
    )


def save(fig, path):
    """Every plot's ending: laid out, written at 110 dpi, closed."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dist_of(lat):
    """(quantile, ns) pairs; older results carry only the headline percentiles."""
    if "distribution" in lat:
        return lat["distribution"]
    return [(0.5, lat["p50_ns"]), (0.95, lat["p95_ns"]), (0.99, lat["p99_ns"]), (0.999, lat["p999_ns"]),
            (1.0, lat["max_ns"])]


def percentile_axis(ax, ylabel):
    """Log-log axes with the x axis in percentiles (p50 … max)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([2, 10, 100, 1000, 10000, 100000])
    ax.set_xticklabels(["p50", "p90", "p99", "p99.9", "p99.99", "max"])
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
