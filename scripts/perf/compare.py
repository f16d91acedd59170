#!/usr/bin/env python3
"""Joins CSVs in the peers' columns (op,dtype,T,H,impl,us,tbps) from one GPU sitting into a
Markdown table: one row per (op, dtype, T, H), one column per implementation, and for each of
ours (an impl named ferrinfer*: the Rust bench, the Python module, an adapter) the ratio
best-peer time / our time (> 1 means ours is faster).

Usage: scripts/perf/compare.py peers.csv ferrinfer.csv [more.csv ...]
"""
import csv
import sys


def main(paths):
    times, impls = {}, []
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (row["op"], row["dtype"], int(row["T"]), int(row["H"]))
                times.setdefault(key, {})[row["impl"]] = float(row["us"])
                if row["impl"] not in impls:
                    impls.append(row["impl"])
    peers = [i for i in impls if not i.startswith("ferrinfer")]
    ours = [i for i in impls if i.startswith("ferrinfer")]
    print("| op | dtype | T | H | " + " | ".join(f"{i} µs" for i in impls) + " | "
          + " | ".join(f"best peer / {i}" for i in ours) + " |")
    print("|---|---|---:|---:|" + "---:|" * (len(impls) + len(ours)))
    for key in sorted(times, key=lambda k: (k[0], k[1], k[3], k[2])):
        row = times[key]
        cells = [f"{row[i]:.3f}" if i in row else "" for i in impls]
        best = min((row[p] for p in peers if p in row), default=None)
        ratios = [f"{best / row[i]:.2f}" if best and i in row else "" for i in ours]
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells + ratios) + " |")

if __name__ == "__main__":
    main(sys.argv[1:])
