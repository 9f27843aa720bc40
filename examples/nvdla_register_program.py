"""Write your own NVDLA register program and replay it, the way NVIDIA's trace tests work.

The program max-pools a 6 x 8 x 12 int8 cube (H x W x C) with a 2 x 2 kernel and stride 2 on
the PDP, reading the cube from memory (PDP_RDMA) and writing the result back (PDP WDMA):

1. lay the input out in NVDLA's feature format (8-byte atoms on nv_small: channel c of pixel
   (h, w) at ``base + (c // 8) * surface_stride + h * line_stride + w * 8 + c % 8``) and save
   it as a ``.dat`` file of packets;
2. program the registers (names and fields from NVIDIA's ``NVDLA_PDP.rdl`` and
   ``NVDLA_PDP_RDMA.rdl``: sizes are written minus one), enable the two units;
3. wait for the PDP's done interrupt and check the CRC-32 of the output range, computed here
   from a plain numpy reshape-max, independently of npulab's PDP.

Run it:  python examples/nvdla_register_program.py   (or npulab nvdla trace <folder> -v)
"""

from __future__ import annotations

import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

H, W, C = 6, 8, 12
SRC, DST = 0x8000_0000, 0x8010_0000
LINE = W * 8                      # one line of one surface: W atoms of 8 bytes
SURF = H * LINE
OUT_H, OUT_W = H // 2, W // 2
OUT_LINE, OUT_SURF = OUT_W * 8, OUT_H * OUT_W * 8
SURFACES = -(-C // 8)


def feature_bytes(cube: np.ndarray, line: int, surf: int) -> dict[int, int]:
    """offset -> byte of an (h, w, c) int8 cube in NVDLA's layout (one channel at a time)."""
    out = {}
    for h in range(cube.shape[0]):
        for w in range(cube.shape[1]):
            for c in range(cube.shape[2]):
                out[(c // 8) * surf + h * line + w * 8 + c % 8] = int(cube[h, w, c]) & 0xFF
    return out


def write_trace(root) -> tuple[Path, np.ndarray, np.ndarray]:
    """Write the trace folder under ``root``; return (folder, input cube, expected output)."""
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (H, W, C)).astype(np.int8)
    expected = x.reshape(OUT_H, 2, OUT_W, 2, C).max(axis=(1, 3))
    name = "pdp_6x8x12_2x2_max_int8_hand"
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    packets = ",\n".join(f"{{offset:{off:#x}, size:1, payload:{b:#04x}}}"
                         for off, b in sorted(feature_bytes(x, LINE, SURF).items()))
    (folder / f"{name}_in.dat").write_text("{\n" + packets + "\n}\n")
    # the expected output range: zeros (mem_init) plus the pooled cube; the PDP pools whole
    # atoms, so lanes 12..15 of the second surface hold max(0, 0, 0, 0) = 0
    size = SURFACES * OUT_SURF
    image = np.zeros(size, np.uint8)
    for off, b in feature_bytes(expected, OUT_LINE, OUT_SURF).items():
        image[off] = b
    crc = zlib.crc32(image.tobytes())
    regs = [
        ("PDP_RDMA", "D_DATA_CUBE_IN_WIDTH", W - 1), ("PDP_RDMA", "D_DATA_CUBE_IN_HEIGHT", H - 1),
        ("PDP_RDMA", "D_DATA_CUBE_IN_CHANNEL", C - 1),
        ("PDP_RDMA", "D_SRC_BASE_ADDR_LOW", SRC), ("PDP_RDMA", "D_SRC_LINE_STRIDE", LINE),
        ("PDP_RDMA", "D_SRC_SURFACE_STRIDE", SURF), ("PDP_RDMA", "D_SRC_RAM_CFG", 1),  # MC
        ("PDP_RDMA", "D_FLYING_MODE", 1),                                            # OFF_FLYING
        ("PDP_RDMA", "D_POOLING_KERNEL_CFG", 0x10001),    # kernel 2 wide, stride 2 wide
        ("PDP", "D_DATA_CUBE_IN_WIDTH", W - 1), ("PDP", "D_DATA_CUBE_IN_HEIGHT", H - 1),
        ("PDP", "D_DATA_CUBE_IN_CHANNEL", C - 1),
        ("PDP", "D_DATA_CUBE_OUT_WIDTH", OUT_W - 1), ("PDP", "D_DATA_CUBE_OUT_HEIGHT", OUT_H - 1),
        ("PDP", "D_DATA_CUBE_OUT_CHANNEL", C - 1),
        ("PDP", "D_OPERATION_MODE_CFG", 0x11),            # MAX, OFF_FLYING, no split
        # KERNEL_WIDTH[3:0], KERNEL_HEIGHT[11:8], STRIDE_WIDTH[19:16], STRIDE_HEIGHT[23:20]
        ("PDP", "D_POOLING_KERNEL_CFG", 0x110101),
        ("PDP", "D_DST_BASE_ADDR_LOW", DST), ("PDP", "D_DST_LINE_STRIDE", OUT_LINE),
        ("PDP", "D_DST_SURFACE_STRIDE", OUT_SURF), ("PDP", "D_DST_RAM_CFG", 1),      # MC
        ("PDP", "D_DATA_FORMAT", 0),                                                 # INT8
    ]
    lines = [f"mem_init(pri_mem, {SRC:#x}, {SURFACES * SURF:#x}, ALL_ZERO);",
             f'mem_load(pri_mem, {SRC:#x}, "{name}_in.dat");',
             f"mem_init(pri_mem, {DST:#x}, {size:#x}, ALL_ZERO);",
             "reg_write(NVDLA_PDP.S_POINTER_0, 0x0);", "reg_write(NVDLA_PDP_RDMA.S_POINTER_0, 0x0);"]
    lines += [f"reg_write(NVDLA_{u}.{r}_0, {v:#x});" for u, r, v in regs]
    lines += ["reg_write(NVDLA_PDP.D_OP_ENABLE_0, 0x1);",
              "reg_write(NVDLA_PDP_RDMA.D_OP_ENABLE_0, 0x1);",
              "intr_notify(PDP_0, sync_id_0);",
              f"check_crc(sync_id_0, 1, {DST:#x}, {size:#x}, {crc:#010x});"]
    (folder / f"{name}.cfg").write_text("\n".join(lines) + "\n")
    return folder, x, expected


def main() -> int:
    from hw.nvdla.trace import play
    with tempfile.TemporaryDirectory() as tmp:
        folder, _, _ = write_trace(tmp)
        result = play(folder)
        print(result.line())
        for run in result.layers:
            print(f"  {run.unit}: {run.detail}; {run.cycles:,} cycles on nv_small (cycle model)")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
