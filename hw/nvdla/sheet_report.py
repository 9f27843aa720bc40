"""NVIDIA's NVDLA performance spreadsheet, one network as plain data (``npulab nvdla
spreadsheet``).

:func:`spreadsheet_result` evaluates a network of :mod:`hw.nvdla.sheet_models` and returns
every layer (MACs, traffic in the sheet's KB, cycles per roofline ceiling, max cycles, long
pole), the totals (cycles, ms, fps, MAC efficiency), the inputs and which CV-SRAM placement was
used (NVIDIA's, the AlexNet sheet's batching rule or npulab's, with its text): what the command
prints as a table, JSON or CSV.
"""

from __future__ import annotations

from hw.nvdla.sheet_models import evaluate, load_sheet_model

__all__ = ["spreadsheet_result", "RULE_TEXT", "BATCHED_RULE_TEXT"]

#: npulab's placement rule (:func:`hw.nvdla.sheet_models.npulab_placement`), in words.
RULE_TEXT = ("npulab's rule, not NVIDIA's (the sheet has hand-entered placements for 4 MB only): "
             "per layer, input and output in CV-SRAM when both fit, else the smaller one if it "
             "fits, else DRAM; the image comes from DRAM; all weights in CV-SRAM when they fit "
             "next to the largest layer's activations, else streamed from DRAM every image "
             "(FC weights amortised over the FC batch)")
#: The AlexNet sheet's batching rule (:func:`~hw.nvdla.sheet_models.nvidia_batched_placement`).
BATCHED_RULE_TEXT = ("the AlexNet sheet's own rule (its formulas): the convolutions run "
                     "batched, B = min over conv layers of floor((CV-SRAM - weights) / (input + "
                     "output)) images, weights read from DRAM once per B images (FC weights "
                     "once per FC batch); activations in CV-SRAM, except the image, the last "
                     "convolution's output and the FC inputs, which go through DRAM")


def _num(v):
    """Integral floats as ints (cycles, KB), everything else unchanged."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def spreadsheet_result(model: str = "resnet50", sram_mb: float = 0, *, freq_mhz=None,
                       dram_gbs=None, macs=None, npulab_rule: bool = False) -> dict:
    """One network of the spreadsheet (:func:`hw.nvdla.sheet_models.evaluate`) as plain data
    (``npulab nvdla spreadsheet``'s JSON): ``{"model", "title", "source", "sheet_model",
    "sram_mb", "placement", "placement_rule", "config", "units", "layers": [...],
    "totals": {"cycles", "time_ms", "fps", "hw_mac_efficiency", "network_mac_efficiency",
    "macs", "dram_traffic_kb", ...}, "sheet_time_ms"}``; ``sheet_time_ms`` is NVIDIA's
    published time when the inputs are the sheet's own, else None.

    Raises ``ValueError`` naming the parameter (``model = ...``, ``sram_mb = ...``)."""
    sm = load_sheet_model(model)
    res = evaluate(sm, sram_mb, freq_mhz=freq_mhz, dram_gbs=dram_gbs, macs=macs,
                   npulab_rule=npulab_rule)
    cfg, sram = res["cfg"], res["kind"] == "sram"
    layers = []
    for ly, row in zip(res["layers"], res["rows"]):
        d = {"name": ly.name, "attribute": ly.attribute, "role": ly.role,
             "summed": row["max_cycles"] is not None,
             "macs": row["calculation"],
             "input_kb": _num(row["input_data_size"]), "output_kb": _num(row["output_data_size"]),
             "weight_kb": _num(row["weight_data_size"]),
             "dram_traffic_kb": _num(row["dram_traffic"]), "dram_cycles": _num(row["dram_cycles"])}
        if sram:
            d.update(cvsram_read_traffic_kb=_num(row["cvsram_read_traffic"]),
                     cvsram_read_cycles=_num(row["cvsram_read_cycles"]),
                     cvsram_write_traffic_kb=_num(row["cvsram_write_traffic"]),
                     cvsram_write_cycles=_num(row["cvsram_write_cycles"]))
        d.update(mac_cycles=_num(row["mac_cycles"]), max_cycles=_num(row["max_cycles"]),
                 long_pole=row["long_pole"])
        layers.append(d)
    t = res["totals"]
    summed = [d for d in layers if d["summed"]]
    totals = {"cycles": _num(t["total_cycles"]), "time_ms": t["total_time_ms"], "fps": t["fps"],
              "hw_mac_efficiency": t["hw_mac_effi"],
              "network_mac_efficiency": t["network_mac_effi"],
              "macs": sum(d["macs"] for d in layers if d["macs"] is not None),
              "dram_traffic_kb": _num(sum(d["dram_traffic_kb"] for d in summed))}
    if sram:
        totals["cvsram_read_traffic_kb"] = _num(sum(d["cvsram_read_traffic_kb"] for d in summed))
        totals["cvsram_write_traffic_kb"] = _num(sum(d["cvsram_write_traffic_kb"] for d in summed))
    unmodified = freq_mhz is None and dram_gbs is None and macs is None \
        and res["placement"] != "npulab"
    return {
        "model": model, "title": sm.title, "source": sm.source,
        "sheet_model": "cv-sram" if sram else "dram-only",
        "sram_mb": _num(float(sram_mb)), "placement": res["placement"],
        "placement_rule": {"npulab": RULE_TEXT, "nvidia-batched": BATCHED_RULE_TEXT}.get(
            res["placement"]),
        "config": {"macs": cfg.n_mac, "freq_mhz": _num(cfg.freq_mhz), "cbuf_kb": _num(cfg.cbuf_kb),
                   "dram_gbs": _num(cfg.dram_gbs), "cvsram_read_gbs": _num(cfg.sram_read_gbs),
                   "cvsram_write_gbs": _num(cfg.sram_write_gbs), "fc_batch": cfg.fc_batch,
                   "input_bytes": _num(cfg.input_bytes), "weight_bytes": _num(cfg.weight_bytes),
                   "fc_weights_batched_in_dram_only": sm.dram_only_fc_batched},
        "units": {"kb": "1024 bytes (the sheet's KB)",
                  "cycles": "ceil(KB / (GB/s) * MHz) for transfers (the sheet's formula)"},
        "layers": layers, "totals": totals,
        "sheet_time_ms": sm.sheet_time_ms.get(res["kind"]) if unmodified else None,
    }
