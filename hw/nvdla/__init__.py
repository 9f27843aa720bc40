"""NVDLA-like datapath (docs/nvdla.md).

Configurations and memory: :mod:`.config` (presets ``sim_configs/nv_*.toml``), :mod:`.memory`.
Numerics, bit-exact with NVIDIA's C model: :mod:`.numerics` (scalar rules), :mod:`.conv`
(functional convolution into CACC), :mod:`.sdp` (the SDP pipeline), :mod:`.pdp` (pooling),
:mod:`.lut` and :mod:`.cdp` (lookup table, LRN), :mod:`.fp16` (the fp16 path, within NVIDIA's
tolerance), :mod:`.quant` (the int8 per-channel quantization pass to register values).
Timing: :mod:`.program` (hardware layers, built from IR graphs by
:mod:`compiler.backends.nvdla`), :mod:`.cycles` (structural cycle model),
:mod:`.spreadsheet`, :mod:`.sheet_reference` and :mod:`.sheet_models` (NVIDIA's performance
spreadsheet: its formulas, its reference CSVs, the shipped tables).
RTL: :mod:`.rtl` (Amaranth units co-simulated against :mod:`.numerics`).
"""
