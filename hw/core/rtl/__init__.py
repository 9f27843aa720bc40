"""The core's hardware in Amaranth 0.5 (docs/core.md): :mod:`.engines` (DMA and vector
engines), :mod:`.core` (sequencer, scratchpads, CSRs, the top level)."""
