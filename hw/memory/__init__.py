"""Memory system models: SRAM scratchpads (:mod:`hw.memory.sram`), DRAM timing
(:mod:`hw.memory.dram`), the PCIe host link (:mod:`hw.memory.link`) and DMA engines
(:mod:`hw.memory.dma`). The executor (:mod:`hw.executor`) puts them together."""
