#!/usr/bin/env python3
"""Sums kernel traces from libstrata_kernel_trace.so (tests/bench/kernel_trace.cc) by kernel.

  kernel_trace.py A.tsv [B.tsv ...] [--top=N] [--from_s=T] [--from_kernel=TEXT]

Each trace: per kernel (demangled, its parameters dropped) the launches, the total and mean
time; the traces side by side, sorted by the first one's total. --from_s skips the first T
seconds of each trace (start-up: weight load, matmul tuning); --from_kernel starts each at the
first kernel whose (mangled) name holds TEXT. Then the GPU's busy time (the
union of the kernels' intervals) against the span, and the time two or more kernels ran at
once.
"""
import collections
import subprocess
import sys


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return out.split("\n")[: len(names)]
    except (OSError, subprocess.CalledProcessError):
        return names


def short(name):
    depth, out = 0, []
    for ch in name.replace("(anonymous namespace)::", "").split("(")[0]:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<..>")
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).replace("void ", "")
    return text.split("::")[-1] if "::" in text else text


def load(path, from_s, from_kernel):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 7:
                continue
            rows.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3], parts[6]))
    if not rows:
        return []
    rows.sort()
    if from_kernel:
        rows = rows[next((i for i, r in enumerate(rows) if from_kernel in r[4]), len(rows)):]
        if not rows:
            return []
    t0 = rows[0][0] + int(from_s * 1e9)
    return [r for r in rows if r[0] >= t0]


def summarize(rows):
    names = sorted({r[4] for r in rows})
    pretty = dict(zip(names, demangle(names)))
    per = collections.defaultdict(lambda: [0, 0, collections.Counter(), set()])
    for start, end, stream, grid, name in rows:
        entry = per[short(pretty[name])]
        entry[0] += 1
        entry[1] += end - start
        entry[2][grid] += 1
        entry[3].add(stream)
    # Busy time (union of intervals) and time with two or more kernels at once.
    events = []
    for start, end, *_ in rows:
        events += [(start, 1), (end, -1)]
    events.sort()
    busy = overlap = 0
    depth, last = 0, None
    for t, d in events:
        if last is not None:
            if depth >= 1:
                busy += t - last
            if depth >= 2:
                overlap += t - last
        depth += d
        last = t
    span = rows[-1][1] - rows[0][0] if rows else 0
    return per, busy, overlap, span


def main(argv):
    top, from_s, from_kernel, paths = 25, 0.0, "", []
    for a in argv[1:]:
        if a.startswith("--top="):
            top = int(a.split("=")[1])
        elif a.startswith("--from_kernel="):
            from_kernel = a.split("=", 1)[1]
        elif a.startswith("--from_s="):
            from_s = float(a.split("=")[1])
        else:
            paths.append(a)
    if not paths:
        print(__doc__)
        return 2
    sums = [summarize(load(p, from_s, from_kernel)) for p in paths]
    first = sums[0][0]
    order = sorted(first, key=lambda k: -first[k][1])
    for per, *_ in sums[1:]:
        order += [k for k in sorted(per, key=lambda k: -per[k][1]) if k not in order]
    header = "| kernel | " + " | ".join(f"{p}: n, total ms, mean us, grid, streams" for p in paths) + " |"
    print(header)
    print("|---|" + "---|" * len(paths))
    for name in order[:top]:
        cells = []
        for per, *_ in sums:
            if name in per:
                n, total, grids, streams = per[name]
                grid = grids.most_common(1)[0][0]
                cells.append(f"{n}, {total / 1e6:.1f}, {total / n / 1e3:.1f}, {grid}, {len(streams)}")
            else:
                cells.append("-")
        print(f"| {name[:70]} | " + " | ".join(cells) + " |")
    for path, (per, busy, overlap, span) in zip(paths, sums):
        total = sum(v[1] for v in per.values())
        print(f"{path}: span {span / 1e6:.1f} ms, GPU busy {busy / 1e6:.1f} ms, kernels' sum {total / 1e6:.1f} ms, "
              f"two or more at once {overlap / 1e6:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
