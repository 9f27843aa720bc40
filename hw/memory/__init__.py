"""Memory system models (SRAM scratchpads, DRAM, host links, DMA). Not yet built: see issue 3."""
