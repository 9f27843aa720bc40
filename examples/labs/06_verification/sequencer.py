"""Lab 6, step 5: a compiled program on the RTL core; its sequencer, correct and broken.

Compiles a max pool, a ReLU and an add for a core-sized chip, runs the program on the core in
Amaranth's simulator, and prints each command's start and end cycle next to the executor's.
Then runs the same program on a core whose store engine waits for one vector command fewer
than its command word says (the ``start-early`` mutation) and prints what goes wrong.
"""

import sys

import numpy as np

from compiler.backends.systolic import compile_graph
from compiler.ir import Activation, Binary, Graph, Pool
from hw.core.isa import core_chip
from hw.program import Kind
from npulab.core_verify import verify

chip = core_chip(lanes=8, kib=1)
pool = Pool(name="p", kind="max", in_h=8, in_w=8, channels=8, kernel_h=2, kernel_w=2,
            stride_h=2, stride_w=2)
size = pool.out_h * pool.out_w * 8
graph = Graph("lab6", (pool, Activation(name="r", fn="relu", elements=size, inputs=("p",)),
                       Binary(name="a", fn="add", elements=size, inputs=("r", "p"))))
program = compile_graph(graph, chip)
x = np.random.default_rng(6).integers(-128, 128, size=(1, 8, 8, 8), dtype=np.int8)
mutation = sys.argv[1] if len(sys.argv) > 1 else None
v = verify(program, graph, chip, {"<input>": x}, mutation=mutation)
print(f"{'#':>3} {'command':<8} {'waits (load array store vector)':<32} {'core':>12} {'executor':>12}")
words = {i: w for q, index in zip(v.core.queues, v.core.index) for w, i in zip(q, index)}
for i in range(len(program)):
    w = words[i]
    waits = " ".join(str(w[f"wait{e}"]) for e in range(4))
    print(f"{i:>3} {Kind(program.columns['kind'][i]).name:<8} {waits:<32} "
          f"{f'[{v.run.start[i]}, {v.run.end[i]})':>12} "
          f"{f'[{v.expected_start[i]}, {v.expected_end[i]})':>12}")
print("PASS" if v.ok else "FAIL", f"({v.run.cycles} cycles)")
for line in v.mismatches:
    print("  " + line)
