"""NVDLA-like datapath (issue 5, in progress): build configurations (:mod:`.config`) and
NVIDIA's performance spreadsheet reproduced (:mod:`.spreadsheet`). See docs/nvdla.md."""
