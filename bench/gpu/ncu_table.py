#!/usr/bin/env python3
"""Per-kernel table of an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum[,dram__bytes.sum]).

    python3 bench/gpu/ncu_table.py FILE.csv [--steps N]

Groups the launches by kernel name (templates and arguments stripped), and prints per name:
launches, total time, mean time, DRAM bytes and the achieved DRAM bandwidth; with --steps,
the totals per step too. The last line is the sum over all kernels."""
import argparse
import collections
import csv
import re
import sys


def short_name(name):
    name = re.sub(r"\((anonymous namespace)\)::|<unnamed>::", "", name).replace("void ", "")
    name = re.sub(r"\(.*", "", name).strip()
    return name.split("<")[0].split("::")[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    rows = list(csv.reader(l for l in open(a.csv) if l.startswith('"')))
    if not rows:
        sys.exit(f"{a.csv}: no ncu CSV rows (did ncu profile any kernel?)")
    head, rows = rows[0], rows[1:]
    col = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    time_us = collections.defaultdict(float)
    dram = collections.defaultdict(float)
    launches = collections.defaultdict(set)
    for r in rows:
        name, metric = short_name(r[col["Kernel Name"]]), r[col["Metric Name"]]
        value = float(r[col["Metric Value"]].replace(",", ""))
        launches[name].add(r[col["ID"]])
        if metric == "gpu__time_duration.sum":
            time_us[name] += value / 1e3  # ns -> us
        elif metric == "dram__bytes.sum":
            dram[name] += value
    total = sum(time_us.values())
    n = max(a.steps, 1)
    print(f"{'kernel':44s} {'launches':>8s} {'us/step':>10s} {'share':>6s} {'mean us':>8s} {'MB/step':>9s} {'GB/s':>7s}")
    for name, t in sorted(time_us.items(), key=lambda kv: -kv[1])[: a.top]:
        k = len(launches[name])
        gbs = dram[name] / (t * 1e-6) / 1e9 if t > 0 and dram[name] > 0 else 0.0
        print(f"{name[:44]:44s} {k // n:8d} {t / n:10.1f} {t / total:6.1%} {t / k:8.2f} "
              f"{dram[name] / n / 1e6:9.1f} {gbs:7.0f}")
    k_all = sum(len(v) for v in launches.values())
    print(f"sum: {total / n:.1f} us per step over {k_all // n} kernels per step ({len(time_us)} kernel names)")


if __name__ == "__main__":
    main()
