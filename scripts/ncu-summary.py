#!/usr/bin/env python3
"""Sums an Nsight Compute CSV (gpu__time_duration.sum per kernel launch) by
kernel name: launches, total and mean microseconds, share of the total.
Usage: ncu-summary.py FILE.csv [N_STEPS]   (N_STEPS divides totals per step)"""
import csv
import sys
from collections import defaultdict

path = sys.argv[1]
n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
rows = []
with open(path, newline="") as f:
    lines = [l for l in f if l.startswith('"')]  # ncu prefixes its own log lines with ==
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "nsecond")
    us = v / 1e3 if unit.startswith("n") else v if unit.startswith("u") else v * 1e3
    name = r["Kernel Name"].split("(")[0].split("<")[0].strip()
    rows.append((name, us))
by = defaultdict(lambda: [0, 0.0])
for name, us in rows:
    by[name][0] += 1
    by[name][1] += us
total = sum(us for _, us in rows)
print(f"kernels: {len(rows)} launches, {total:.1f} us device time "
      f"({len(rows) / n_steps:.0f} launches, {total / n_steps:.1f} us per step over {n_steps})")
for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"  {name:60s} {n / n_steps:7.1f}/step {us / n_steps:9.1f} us/step "
          f"{us / n:8.2f} us each {100 * us / total:5.1f}%")
