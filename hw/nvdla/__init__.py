"""NVDLA-like datapath. Not yet built: see issue 5."""
