#!/usr/bin/python3
"""Draws a job's timeline (TANDEM_TIMELINE's Chrome-trace file, core/timeline.h) as a picture.

    /usr/bin/python3 scripts/plot_timeline.py TIMELINE.json OUT.png [--iteration N] [--svg OUT.svg]

One row per rank: the pipeline actions (forward and backward of each microbatch, labelled F3 /
B3), the communications beneath them, and an arrow from each send to its receive. One training
iteration is drawn (--iteration, default: the second, past the first one's start-up costs).
For looking at a whole run, open the JSON in https://ui.perfetto.dev instead. Needs Debian's
python3-matplotlib.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("png")
    parser.add_argument("--iteration", type=int, default=2)
    parser.add_argument("--svg")
    args = parser.parse_args()
    events = json.load(open(args.timeline))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    # Messages in flight are async slices ("b" ... "e"): as spans with a duration here.
    ends = {(e["pid"], e["id"]): e["ts"] for e in events if e["ph"] == "e"}
    for e in events:
        if e["ph"] == "b":
            e["ph"], e["dur"], e["in_flight"] = "X", ends.get((e["pid"], e["id"]), e["ts"]) - e["ts"], True
    spans = [e for e in events if e["ph"] == "X" and e["args"].get("iteration") == args.iteration]
    if not spans:
        sys.exit(f"plot_timeline: no spans of iteration {args.iteration} in {args.timeline}")
    t0 = min(e["ts"] for e in spans)
    ms = lambda us: (us - t0) / 1000.0  # noqa: E731
    ranks = sorted(names)
    fig, ax = plt.subplots(figsize=(12, 1.3 + 1.1 * len(ranks)))
    colors = {"forward": "#4c9be8", "backward": "#e8864c", "comm": "#7a7a7a"}
    by_id = {}  # flow id -> (x, y) of its send
    flows = [e for e in events if e["ph"] in ("s", "f")]
    for e in spans:
        row = ranks.index(e["pid"])
        y = len(ranks) - 1 - row
        if e["cat"] == "pipeline":
            kind = "forward" if e["name"].startswith("forward") else "backward"
            microbatch = e["args"].get("microbatch", -1)
            ax.barh(y + 0.15, ms(e["ts"] + e["dur"]) - ms(e["ts"]), left=ms(e["ts"]), height=0.5,
                    color=colors[kind], edgecolor="black", linewidth=0.5)
            ax.text(ms(e["ts"] + e["dur"] / 2), y + 0.15, ("F" if kind == "forward" else "B") + str(microbatch),
                    ha="center", va="center", fontsize=8, color="white", weight="bold")
        elif e["cat"] == "comm":
            # Blocking communication (a receive waiting) dark; sends in flight (isend, from
            # posting until this rank saw them complete) light, beneath.
            in_flight = e.get("in_flight", False)
            ax.barh(y - (0.42 if in_flight else 0.28), max(ms(e["ts"] + e["dur"]) - ms(e["ts"]), 0.05),
                    left=ms(e["ts"]), height=0.1 if in_flight else 0.16,
                    color="#c8c8c8" if in_flight else "#404040")
    spans_by_flow = {}
    for f in flows:
        spans_by_flow.setdefault(f["id"], {})[f["ph"]] = f
    for flow in spans_by_flow.values():
        if "s" not in flow or "f" not in flow:
            continue
        s, f = flow["s"], flow["f"]
        if not (t0 <= s["ts"] and any(e["pid"] == s["pid"] and e["ts"] <= s["ts"] <= e["ts"] + e["dur"] for e in spans)):
            continue
        ys = len(ranks) - 1 - ranks.index(s["pid"]) - 0.15
        yf = len(ranks) - 1 - ranks.index(f["pid"]) - 0.28
        ax.add_patch(FancyArrowPatch((ms(s["ts"]), ys), (ms(f["ts"]), yf), arrowstyle="-|>", mutation_scale=8,
                                     color="#b03030", linewidth=0.7, alpha=0.8))
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([names[r] for r in reversed(ranks)], fontsize=8)
    ax.set_xlabel("ms since the iteration started")
    ax.set_title(f"iteration {args.iteration}: pipeline actions (F/B = forward/backward of microbatch m); "
                 "receives (dark), sends in flight (light), each send's arrow to its receive", fontsize=9)
    ax.set_ylim(-0.7, len(ranks) - 0.3)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    if args.svg:
        fig.savefig(args.svg)


if __name__ == "__main__":
    main()
