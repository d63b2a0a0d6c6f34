#!/usr/bin/env python3
"""Sums one decode step's kernels by name from ncu's raw CSV.

  ncu --profile-from-start off --cache-control none --clock-control none --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      model_bench --models=M --profile=BATCH,CONTEXT > step.csv
  python3 tests/gpu/step_kernels.py step.csv

Prints the step's total time and DRAM bytes, then each kernel (templates and arguments
dropped from the name): launches, microseconds, share of the step, bytes and GB/s.
"""
import collections
import csv
import re
import sys

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")


def main(path):
    header = None
    kernels = collections.OrderedDict()  # name -> [launches, ns, read bytes, written bytes]
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                header = row
                continue
            if header is None or len(row) != len(header) or not row[0].isdigit():
                continue  # ncu's own lines, and the units row under the header
            cells = dict(zip(header, row))
            ns, read, written = (float(cells[m].replace(",", "")) for m in METRICS)
            name = re.sub(r"\(.*", "", cells["Kernel Name"])
            for prefix in ("void ", "strata::<unnamed>::", "strata::kernels::internal::"):
                name = name.replace(prefix, "")
            k = kernels.setdefault(name[:60], [0, 0.0, 0.0, 0.0])
            k[0] += 1
            k[1] += ns
            k[2] += read
            k[3] += written
    if not kernels:
        sys.exit(f"{path}: no kernels (was model_bench run with --profile under ncu?)")
    total_ns = sum(k[1] for k in kernels.values())
    total_bytes = sum(k[2] + k[3] for k in kernels.values())
    print(f"step: {total_ns / 1e3:.1f} us, {total_bytes / 1e9:.2f} GB of DRAM traffic, {total_bytes / total_ns:.0f} GB/s")
    for name, (n, ns, read, written) in sorted(kernels.items(), key=lambda item: -item[1][1]):
        print(f"{name:<60} x{n:<4} {ns / 1e3:9.1f} us {100 * ns / total_ns:5.1f}%  "
              f"{(read + written) / 1e6:8.1f} MB {(read + written) / ns:6.0f} GB/s")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
