"""Memory system models: SRAM scratchpads (:mod:`hw.memory.sram`), DRAM timing
(:mod:`hw.memory.dram`), the PCIe host link (:mod:`hw.memory.link`) and DMA engines
(:mod:`hw.memory.dma`; a strided box against the DRAM model: :mod:`hw.memory.dma_box`). The
executor (:mod:`hw.executor`) puts them together."""
