#!/usr/bin/env python3
"""Lab 7: where a transformer block's time goes as the sequence grows, with and without fusion.

Simulates one GPT-2 small / BERT-base shaped block (``zoo.transformer_block``: d_model 768, 12
heads, FFN 3072, pre-norm) on the default chip (native timing: tiles through the scratchpads,
the vector engine, cycle-level DRAM) at each sequence length, twice: with the compiler's fusion
(the default: FlashAttention-style attention, GEMM epilogues, add + layer norm) and with
``CompileOptions(fusion=False)`` (every op alone, each intermediate tensor through DRAM).

Per sequence length it prints cycles, DRAM bytes (read + written) and energy of both runs, and
the share of the cycles each kind of op takes. Layer windows partition a run's cycles, so the
shares add up to 100 %. A fused group's cycles are booked on its first op (its anchor), so in
the fused run ``attention`` includes the softmax, ``ffn`` the GELU and the second residual add,
and ``norm/add`` the add fused with the following layer norm.

Writes ``where_time_goes.csv`` (one row per sequence length, fusion and kind) into the output
folder.

Example (from the repository root)::

    python examples/labs/07_transformer/where_time_goes.py --quick
    python examples/labs/07_transformer/where_time_goes.py
    python examples/labs/07_transformer/where_time_goes.py --quick --set vector.lanes=128
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from compiler.options import CompileOptions
from hw.systolic.config import ConfigError
from npulab import load_chip_config, simulate, zoo

FULL = (128, 256, 512, 1024, 2048, 4096)
QUICK = (128, 256, 512, 1024)

#: Op kinds, in print order, by the op-name suffix of compiler.attention's block.
KINDS = ("proj", "attention", "softmax", "ffn", "gelu", "norm/add")
_SUFFIX = {"q_proj": "proj", "k_proj": "proj", "v_proj": "proj", "out_proj": "proj",
           "scores": "attention", "context": "attention", "softmax": "softmax",
           "fc1": "ffn", "fc2": "ffn", "gelu": "gelu",
           "ln1": "norm/add", "ln2": "norm/add", "add1": "norm/add", "add2": "norm/add"}


def kind_of(layer_name: str) -> str:
    """The kind of a block op (``h.0.attn.q_proj`` -> ``proj``)."""
    return _SUFFIX[layer_name.rsplit(".", 1)[-1]]


def run_one(graph, chip, fusion: bool) -> dict:
    """One simulation: cycles, DRAM bytes (read + write), energy, cycles per kind, the split of
    the attention ops' windows (``attention``: cycles, array compute, vector engine and DRAM
    stall cycles, vector operations), the bytes the ``scores`` layer writes to DRAM, and every
    layer (``LayerResult`` by op name)."""
    result = simulate(graph, chip, options=CompileOptions(fusion=fusion))
    t = result.totals
    by_kind = dict.fromkeys(KINDS, 0)
    attention = dict.fromkeys(("cycles", "array", "vector", "dram_stall", "vector_ops"), 0)
    for layer in result.layers:
        if layer.cycles is None:                                # a fused member: no window
            continue
        by_kind[kind_of(layer.name)] += layer.cycles
        if kind_of(layer.name) in ("attention", "softmax"):
            for key, value in (("cycles", layer.cycles), ("array", layer.compute_cycles),
                               ("vector", layer.stall_vector_cycles),
                               ("dram_stall", layer.stall_dram_cycles),
                               ("vector_ops", layer.actions.vector_ops)):
                attention[key] += value
    scores = next(x for x in result.layers if x.name.endswith(".scores"))
    return {"cycles": t["cycles"], "dram_bytes": t["dram_read_bytes"] + t["dram_write_bytes"],
            "energy_j": result.metrics().network["energy_j"], "by_kind": by_kind,
            "attention": attention,
            "scores_write_bytes": scores.dram_write_bytes, "layers_fused": t["layers_fused"],
            "layers": {x.name: x for x in result.layers}}


def sweep(seq_lens, sets=()) -> list[dict]:
    """For each sequence length: ``seq_len``, ``attn_mac_share`` (the score and context MACs'
    share of the block's MACs) and the ``fused`` and ``unfused`` runs (:func:`run_one`)."""
    chip = load_chip_config(None, list(sets))
    rows = []
    for seq_len in seq_lens:
        graph = zoo.get("transformer_block", seq_len=seq_len)
        attn_macs = sum(op.macs for op in graph if op.name.endswith((".scores", ".context")))
        rows.append({"seq_len": seq_len, "attn_mac_share": attn_macs / graph.macs,
                     "element_bytes": chip.array.precision.bits // 8,
                     "fused": run_one(graph, chip, True), "unfused": run_one(graph, chip, False)})
    return rows


def totals_table(rows) -> list[str]:
    """Cycles, DRAM MB and energy (uJ) fused and unfused, each with the ratio unfused / fused,
    and the bytes the unfused ``scores`` layer writes."""
    head = (f"{'seq':>5}  {'cycles fused':>12} {'unfused':>11} {'ratio':>5}  "
            f"{'DRAM MB fused':>13} {'unfused':>7} {'ratio':>5}  {'uJ fused':>8} {'unfused':>7} "
            f"{'ratio':>5}  {'scores B':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        f, u = r["fused"], r["unfused"]
        lines.append(
            f"{r['seq_len']:>5}  {f['cycles']:>12,} {u['cycles']:>11,} "
            f"{u['cycles'] / f['cycles']:>5.2f}  {f['dram_bytes'] / 1e6:>13.1f} "
            f"{u['dram_bytes'] / 1e6:>7.1f} {u['dram_bytes'] / f['dram_bytes']:>5.2f}  "
            f"{f['energy_j'] * 1e6:>8.0f} {u['energy_j'] * 1e6:>7.0f} "
            f"{u['energy_j'] / f['energy_j']:>5.2f}  {u['scores_write_bytes']:>11,}")
    return lines


def share_table(rows) -> list[str]:
    """Per length and run, each kind's share of the cycles (``-``: fused into another kind's
    group), and the attention GEMMs' share of the MACs."""
    head = (f"{'seq':>5}  {'run':<7}  " + "  ".join(f"{k:>9}" for k in KINDS)
            + f"  {'attn MACs':>9}")
    lines = [head, "-" * len(head)]
    for r in rows:
        for mode in ("fused", "unfused"):
            run = r[mode]
            cells = [f"{100 * run['by_kind'][k] / run['cycles']:>8.1f}%" if run["by_kind"][k]
                     else f"{'-':>9}" for k in KINDS]
            lines.append(f"{r['seq_len']:>5}  {mode:<7}  {'  '.join(cells)}  "
                         f"{100 * r['attn_mac_share']:>8.1f}%")
    return lines


def attention_table(rows) -> list[str]:
    """The windows of the attention ops (scores, softmax, context) split into array compute,
    vector engine and DRAM stall cycles (the rest: SRAM stalls, fills, on-chip moves)."""
    head = (f"{'seq':>5}  {'run':<7}  {'cycles':>11}  {'array':>11}  {'vector':>11}  "
            f"{'DRAM stall':>11}  {'other':>10}  {'vector ops':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        for mode in ("fused", "unfused"):
            a = r[mode]["attention"]
            other = a["cycles"] - a["array"] - a["vector"] - a["dram_stall"]
            lines.append(f"{r['seq_len']:>5}  {mode:<7}  {a['cycles']:>11,}  {a['array']:>11,}  "
                         f"{a['vector']:>11,}  {a['dram_stall']:>11,}  {other:>10,}  "
                         f"{a['vector_ops']:>13,}")
    return lines


def write_csv(rows, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("seq_len", "fusion", "cycles", "dram_bytes", "energy_j", "kind",
                    "kind_cycles"))
        for r in rows:
            for mode in ("fused", "unfused"):
                run = r[mode]
                for kind in KINDS:
                    w.writerow((r["seq_len"], mode == "fused", run["cycles"], run["dram_bytes"],
                                f"{run['energy_j']:.6e}", kind, run["by_kind"][kind]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Lab 7: one transformer block at growing sequence lengths on the default "
                    "chip, fused and unfused: cycles, DRAM bytes, energy, cycle share per op kind.")
    parser.add_argument("--quick", action="store_true",
                        help=f"sequence lengths {', '.join(map(str, QUICK))} only (default "
                             f"{', '.join(map(str, FULL))})")
    parser.add_argument("--seq", type=int, action="append", metavar="N",
                        help="a sequence length (repeatable; replaces the default list)")
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        metavar="KEY=VALUE", help="override a chip field, as npulab run --set")
    parser.add_argument("-o", "--out", default="lab07_out",
                        help="output folder (default lab07_out/)")
    args = parser.parse_args(argv)
    seq_lens = args.seq or (QUICK if args.quick else FULL)
    try:
        for n in seq_lens:
            zoo.get("transformer_block", seq_len=n)           # bad lengths fail before any run
        rows = sweep(seq_lens, args.sets)
    except (ConfigError, ValueError) as exc:
        print(f"where_time_goes.py: error: {exc}", file=sys.stderr)
        return 2
    chip = load_chip_config(None, args.sets)
    print(f"transformer_block (d_model 768, 12 heads, FFN 3072) on {chip.name}"
          + (f" with {', '.join(args.sets)}" if args.sets else "")
          + f", {chip.array.precision.value}, native timing")
    print("ratio = unfused / fused; DRAM = bytes read + written; scores B = bytes the unfused "
          "scores GEMM writes")
    print("\n".join(totals_table(rows)))
    print()
    print("share of the block's cycles by op kind (fused: a group's cycles are on its first op); "
          "attn MACs = share of the MACs in scores and context")
    print("\n".join(share_table(rows)))
    print()
    print("the attention ops' windows (scores + softmax + context; fused: the one group): array "
          "compute, vector engine, DRAM stalls")
    print("\n".join(attention_table(rows)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "where_time_goes.csv")
    print()
    print(f"wrote {out / 'where_time_goes.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
