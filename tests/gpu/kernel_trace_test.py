#!/usr/bin/env python3
"""kernel_trace.py on hand-made traces: names demangled and shortened (anonymous namespaces,
template arguments), launches and times summed by kernel side by side, --from_kernel, and the
busy and overlap times. No GPU needed."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "kernel_trace.py")

# strata::kernels::internal::(anonymous namespace)::DecodeKernel<128>(), and ::MergeKernel().
DECODE = "_ZN6strata7kernels8internal12_GLOBAL__N_112DecodeKernelILi128EEEvv"
MERGE = "_ZN6strata7kernels8internal11MergeKernelEv"


def write(path, rows):
    with open(path, "w") as f:
        for start, end, stream, name in rows:
            f.write(f"{start}\t{end}\t{stream}\t64,8,1\t128\t96\t{name}\n")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=True).stdout


class KernelTraceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.a = os.path.join(self.dir.name, "a.tsv")
        self.b = os.path.join(self.dir.name, "b.tsv")
        # a: two decodes of 4 us and 6 us (overlapping 1 us), then a merge of 1 us.
        write(self.a, [(1000, 5000, 7, DECODE), (4000, 10000, 8, DECODE), (11000, 12000, 7, MERGE)])
        # b: one decode of 20 us, no merge.
        write(self.b, [(0, 20000, 7, DECODE)])

    def tearDown(self):
        self.dir.cleanup()

    def test_sums_by_kernel_side_by_side(self):
        out = run(self.a, self.b)
        rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
        self.assertIn("DecodeKernel<..>", rows)
        self.assertIn("MergeKernel", rows)
        cells = [c.strip() for c in rows["DecodeKernel<..>"].split("|")[2:4]]
        self.assertEqual(cells[0], "2, 0.0, 5.0, 64,8,1, 2")  # two launches, 5 us mean, two streams
        self.assertEqual(cells[1], "1, 0.0, 20.0, 64,8,1, 1")
        self.assertEqual([c.strip() for c in rows["MergeKernel"].split("|")[2:4]], ["1, 0.0, 1.0, 64,8,1, 1", "-"])

    def test_busy_time_and_overlap(self):
        out = run(self.a)
        # span 1000..12000 = 11 us; busy 1..10 and 11..12 = 10 us; overlap 4..5 = 1 us.
        self.assertIn("span 0.0 ms, GPU busy 0.0 ms, kernels' sum 0.0 ms, two or more at once 0.0 ms", out)
        big = os.path.join(self.dir.name, "big.tsv")
        write(big, [(0, 4_000_000, 1, DECODE), (3_000_000, 5_000_000, 2, DECODE)])
        self.assertIn("span 5.0 ms, GPU busy 5.0 ms, kernels' sum 6.0 ms, two or more at once 1.0 ms", run(big))

    def test_from_kernel_starts_at_its_first_launch(self):
        out = run("--from_kernel=MergeKernel", self.a)
        self.assertNotIn("DecodeKernel", out)
        self.assertIn("MergeKernel", out)


if __name__ == "__main__":
    unittest.main()
