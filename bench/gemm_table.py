#!/usr/bin/env python3
"""Runs bench/gemm_libs.cpp's binaries in interleaved rounds and prints one
markdown table: the median us per dot_general for each GEMM shape and library,
the fastest in bold, and each library's sum over the program.

  python3 bench/gemm_table.py seed 15 "capstep=/tmp/gemm_capstep" \\
      "OpenBLAS Haswell=/tmp/gemm_openblas:OPENBLAS_CORETYPE=Haswell" "libxsmm=/tmp/gemm_xsmm"

Each column is LABEL=BINARY[:VAR=VALUE...]. Every run gets OMP_NUM_THREADS=1
and neither OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE unless the column sets them.
"""
import os
import re
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    model, rounds, columns = sys.argv[1], int(sys.argv[2]), []
    for spec in sys.argv[3:]:
        label, rest = spec.split("=", 1)
        binary, *assignments = rest.split(":")
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["OMP_NUM_THREADS"] = "1"
        for a in assignments:
            k, v = a.split("=", 1)
            env[k] = v
        columns.append((label, binary, env))
    times, heads, shapes = {}, {}, []
    for _ in range(rounds):  # every column once per round
        for label, binary, env in columns:
            out = subprocess.run([binary, model], env=env, capture_output=True, text=True, check=True).stdout
            heads[label] = out.splitlines()[0]
            for line in out.splitlines():
                m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([01])\s+([01])\s+(\S+)", line)
                if not m:
                    continue
                key = tuple(int(x) for x in m.groups()[:7])
                if key not in shapes:
                    shapes.append(key)
                if m.group(8) != "no":
                    times.setdefault((label, key), []).append(float(m.group(8)))
    print(f"model {model}, {rounds} interleaved rounds; median us per dot_general (all of its batch)")
    for label, _, _ in columns:
        print(f"- {label}: {heads[label]}")
    print()
    print("| count | batch | M | N | K | op(A) op(B) | " + " | ".join(l for l, _, _ in columns) + " |")
    print("|" + "---|" * (6 + len(columns)))
    total = {l: 0.0 for l, _, _ in columns}
    missing = {l: False for l, _, _ in columns}
    for key in shapes:
        count, batch, m, n, k, ta, tb = key
        cells = []
        for label, _, _ in columns:
            t = times.get((label, key))
            if not t:
                cells.append(None)
                missing[label] = True
                continue
            cells.append(statistics.median(t))
            total[label] += count * cells[-1]
        best = min(c for c in cells if c is not None)
        text = ["—" if c is None else (f"**{c:.1f}**" if c == best else f"{c:.1f}") for c in cells]
        print(f"| {count} | {batch} | {m} | {n} | {k} | {'NT'[ta]}{'NT'[tb]} | " + " | ".join(text) + " |")
    print("| **sum** | | | | | | " +
          " | ".join(f"{total[l]:.0f}" + (" (no NT)" if missing[l] else "") for l, _, _ in columns) + " |")


if __name__ == "__main__":
    main()
