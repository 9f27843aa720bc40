"""The core's AXI4 master port (hw.core.rtl.axi) and the slave memory that checks it
(hw.core.axi_sim): any piece at any alignment against a numpy memory, bursts split at 4 KB,
compiled programs bit-exact through AXI and through a stalling memory, error responses, and
the checker catching a master that breaks the rules."""

import numpy as np
import pytest
from amaranth import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator

from compiler.backends.systolic import compile_graph
from compiler.backends.core import lower
from compiler.ir import Activation, Graph, Pool
from hw.core import cosim as core_sim
from hw.core.axi_sim import AxiMemory, AxiProtocolError
from hw.core.isa import core_chip
from hw.core.rtl.axi import AxiBridge, AxiCore, axi4_signature
from hw.program import Engine
from npulab import core_verify as cosim



def _pieces(rng, n: int, lo: int, hi: int, row: int) -> list[tuple[int, int]]:
    """``n`` pieces of 1 to ``row`` bytes in [lo, hi), two in five across a 4 KB line."""
    out = []
    for _ in range(n):
        if rng.random() < 0.4:
            line = 4096 * int(rng.integers(lo // 4096 + 1, hi // 4096))
            before = int(rng.integers(1, row))
            out.append((line - before, int(rng.integers(before + 1, row + 1))))
        else:
            out.append((int(rng.integers(lo, hi - row)), int(rng.integers(1, row + 1))))
    return out


def _bursts(pieces) -> int:
    """One burst a piece, two for a piece across a 4 KB line."""
    return sum(1 + (a // 4096 != (a + b - 1) // 4096) for a, b in pieces)


def _cycles(pieces, width: int) -> int:
    """The bridge's cycles with a slave that never waits: per piece, one to take the
    request, one to answer it, and per burst one for the address and one per data beat (a
    write's response takes the cycle its address would)."""
    beats = sum((a + b - 1) // width - a // width + 1 for a, b in pieces)
    return 2 * len(pieces) + _bursts(pieces) + beats


def _drive_bridge(row: int, width: int, *, n: int = 40, stall: float = 0.3, latency: int = 2,
                  seed: int = 0):
    """Reads from the lower half and writes to the upper half of a 16 KiB memory, side by
    side, through the bridge; returns (memory after, numpy's memory, reads got, reads wanted,
    slave)."""
    rng = np.random.default_rng(seed)
    size = 4 * 4096
    mem = rng.integers(0, 256, size, dtype=np.uint8)
    want_mem = mem.copy()
    dut = AxiBridge(row, width)
    slave = AxiMemory(dut.axi, mem, width, latency=latency, stall=stall, seed=seed + 1)
    reads = _pieces(rng, n, 0, size // 2, row)
    writes = _pieces(rng, n, size // 2, size, row)
    data = [rng.integers(0, 256, row, dtype=np.uint8) for _ in range(n)]
    got, want = [], [int.from_bytes(mem[a:a + b].tobytes(), "little") for a, b in reads]

    async def bench(ctx):
        ri = wi = 0
        for _ in range(50 * n * (latency + 8)):
            if ri == wi == n:
                break
            ctx.set(dut.mem_rd.valid, ri < n)
            ctx.set(dut.mem_wr.valid, wi < n)
            if ri < n:
                ctx.set(dut.mem_rd.payload, {"addr": reads[ri][0], "bytes": reads[ri][1]})
            if wi < n:
                ctx.set(dut.mem_wr.payload, {"addr": writes[wi][0], "bytes": writes[wi][1],
                                             "data": int.from_bytes(data[wi].tobytes(),
                                                                    "little")})
            slave.step(ctx)
            if ri < n and ctx.get(dut.mem_rd.ready):
                got.append(ctx.get(dut.mem_rd_data) & ((1 << 8 * reads[ri][1]) - 1))
                ri += 1
            if wi < n and ctx.get(dut.mem_wr.ready):
                a, b = writes[wi]
                want_mem[a:a + b] = data[wi][:b]
                wi += 1
            await ctx.tick()
        else:
            raise AssertionError("the bridge did not finish")
        assert not ctx.get(dut.error)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return mem, want_mem, got, want, slave, reads, writes


@pytest.mark.parametrize("row,width", [(8, 8), (8, 4), (16, 8), (4, 16), (64, 32)])
def test_the_bridge_moves_any_piece_at_any_alignment(row, width):
    mem, want_mem, got, want, slave, reads, writes = _drive_bridge(row, width, seed=row + width)
    assert got == want
    assert np.array_equal(mem, want_mem)
    # every piece was a burst or, across a 4 KB line, two: the checker saw them all
    assert slave.bursts == {"read": _bursts(reads), "write": _bursts(writes)}
    assert min(slave.bursts.values()) > 45


def test_the_bridge_without_latency_or_stalls_takes_four_cycles_a_piece():
    """One burst in flight per direction: request, address, data, answer (docs/core.md),
    reads and writes side by side."""
    mem, want_mem, got, want, slave, reads, writes = _drive_bridge(8, 8, stall=0.0, latency=0,
                                                                   n=30, seed=3)
    assert got == want and np.array_equal(mem, want_mem)
    assert slave.t == max(_cycles(reads, 8), _cycles(writes, 8))


@pytest.fixture(scope="module")
def chip():
    return core_chip()


def _pool_relu(chip):
    pool = Pool(name="p", kind="max", batch=2, in_h=9, in_w=10, channels=16, kernel_h=3,
                kernel_w=2, stride_h=2, stride_w=2, pad_top=1, pad_left=1)
    size = 2 * pool.out_h * pool.out_w * 16
    graph = Graph("pool_relu", (pool, Activation(name="r", fn="relu", elements=size,
                                                 inputs=("p",))))
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, size=(2, 9, 10, 16), dtype=np.int8)
    return graph, compile_graph(graph, chip), {"<input>": x}


@pytest.fixture(scope="module")
def pool_relu(chip):
    graph, program, values = _pool_relu(chip)
    ideal = cosim.verify(program, graph, chip, values)
    assert ideal.ok, ideal.mismatches
    return graph, program, values, ideal


@pytest.mark.parametrize("memory", [
    {"stall": 0.35, "seed": 1},
    {"port": "axi", "latency": 3, "stall": 0.25, "seed": 2},
    {"port": "axi", "latency": 1, "data_bytes": 16, "stall": 0.1, "seed": 3},
])
def test_a_program_runs_bit_exact_through_a_slower_memory(chip, pool_relu, memory):
    graph, program, values, ideal = pool_relu
    v = cosim.verify(program, graph, chip, values, memory=memory)
    # outputs bit-exact; only the DMA commands are longer; nothing starts early
    assert v.ok, v.mismatches
    assert v.run.cycles > ideal.run.cycles
    dma = list(v.core.index[Engine.LOAD]) + list(v.core.index[Engine.STORE])
    longer = v.run.end[dma] - v.run.start[dma] > ideal.run.end[dma] - ideal.run.start[dma]
    assert longer.mean() > 0.5


@pytest.mark.parametrize("latency,width", [(0, 4), (0, 8), (5, 8), (2, 32)])
def test_the_axi_core_is_cycle_matched_when_the_slave_never_stalls(chip, pool_relu, latency,
                                                                   width):
    """The executor, told the AXI port's cycles (hw.core.timing.durations(core, axi=...)),
    predicts every command's start and end; the DMA commands differ from the ideal port's."""
    from hw.core.timing import durations

    graph, program, values, ideal = pool_relu
    v = cosim.verify(program, graph, chip, values,
                     memory={"port": "axi", "latency": latency, "data_bytes": width})
    assert v.ok, v.mismatches
    plain, axi = durations(v.core), durations(v.core, (width, latency))
    dma = list(v.core.index[Engine.LOAD]) + list(v.core.index[Engine.STORE])
    assert (axi[dma] > plain[dma]).all()
    others = np.setdiff1d(np.arange(len(plain)), dma)
    assert np.array_equal(axi[others], plain[others])


def test_an_error_response_sets_status_bit_3(chip):
    """A memory too small for the program's output: the slave answers SLVERR, STATUS bit 3
    is set, and the next start clears it."""
    graph = Graph("odd", (Activation(name="r", fn="relu", elements=100),))
    program = compile_graph(graph, chip)
    core = lower(program, graph, chip)
    image = cosim.dram_image(program, graph, {"<input>": np.arange(-50, 50, dtype=np.int8)})
    out = core.program.tensors["r"]
    assert len(image) > out
    fine = core_sim.run(core, image, port="axi")
    assert not fine.axi_error
    short = core_sim.run(core, image[:out], port="axi")
    assert short.axi_error
    assert np.array_equal(short.memory, image[:len(short.memory)])   # nothing written
    v = cosim.verify(program, graph, chip, {"<input>": np.arange(-50, 50, dtype=np.int8)},
                     memory={"port": "axi"})
    assert v.ok and not v.run.axi_error


class _Master(wiring.Component):
    """An AXI4 master port driven by the testbench, to break the rules on purpose."""

    def __init__(self):
        super().__init__({"axi": Out(axi4_signature(8))})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        return m


def _broken(steps, stall: float = 0.0) -> str:
    """Run ``steps`` (per cycle: {channel: {signal: value}}) against the checking slave and
    return its complaint."""
    dut = _Master()
    slave = AxiMemory(dut.axi, np.zeros(16384, np.uint8), 8, latency=0, stall=stall)

    async def bench(ctx):
        for step in steps:
            for ch, values in step.items():
                for name, value in values.items():
                    ctx.set(getattr(getattr(dut.axi, ch), name), value)
            slave.step(ctx)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    with pytest.raises(AxiProtocolError) as err:
        sim.run()
    return str(err.value)


def test_the_slave_catches_a_master_that_breaks_the_rules():
    ar = {"valid": 1, "addr": 4088, "len": 1, "size": 3, "burst": 1}
    assert "crosses a 4 KB boundary" in _broken([{"ar": ar}])
    assert "size 2" in _broken([{"ar": {**ar, "addr": 0, "size": 2}}])
    assert "burst type 2" in _broken([{"ar": {**ar, "addr": 0, "burst": 2}}])
    # a slave that holds ready low, and a master that changes its mind
    assert "payload changed" in _broken([{"ar": {**ar, "addr": 0}}, {"ar": {"addr": 64}}],
                                        stall=0.999999)
    aw = {"valid": 1, "addr": 0, "len": 1, "size": 3, "burst": 1}
    assert "wlast set on beat 1 of a 2-beat" in _broken(
        [{"aw": aw, "w": {"valid": 1, "last": 1}}, {"aw": {"valid": 0}}, {}])


def test_bad_settings_are_one_line_errors(chip):
    with pytest.raises(ValueError, match=r"data_bytes = 3: allowed are 4, 8, 16, 32, 64 and 128"):
        AxiBridge(8, 3)
    with pytest.raises(ValueError, match=r"stall = 1.0: allowed is 0 <= stall < 1"):
        AxiMemory(None, np.zeros(8, np.uint8), 8, stall=1.0)
    graph, program, values = _pool_relu(chip)
    with pytest.raises(ValueError, match="port = 'pcie': allowed are 'stream' and 'axi'"):
        core_sim.run(lower(program, graph, chip), np.zeros(8, np.uint8), port="pcie")
    with pytest.raises(ValueError, match="allowed keys are port, stall, latency"):
        cosim.verify(program, graph, chip, values, memory={"delay": 3})


def test_the_axi_core_has_verilog_with_the_specifications_signals(chip):
    from hw.core.synth import core_verilog

    graph, program, _ = _pool_relu(chip)
    text = core_verilog(core=AxiCore(lower(program, graph, chip), data_bytes=16))
    for port in ("axi__ar__addr", "axi__ar__len", "axi__r__data", "axi__aw__valid",
                 "axi__w__strb", "axi__w__last", "axi__b__resp", "csr", "csr_rdata"):
        assert f" {port};" in text, port
    assert "input [127:0] axi__r__data" in text and "output [15:0] axi__w__strb" in text


def test_box_pieces_cover_the_box_a_row_at_a_time():
    """hw.core.timing.box_pieces (the pieces the AXI cycles are counted over) against a walk
    byte by byte: as many pieces as transfer_pieces counts, each inside one scratchpad row,
    each chunk's DRAM bytes in order."""
    from hw.core.timing import box_pieces, transfer_pieces

    rng = np.random.default_rng(11)
    for _ in range(200):
        row = int(rng.choice([4, 8, 16, 32]))
        w = {"n2": int(rng.integers(1, 4)), "n1": int(rng.integers(1, 5)),
             "chunk": int(rng.integers(1, 3 * row)), "stride1": int(rng.integers(40, 200)),
             "stride2": 1000, "dram_addr": int(rng.integers(0, 5000))}
        addr, size = box_pieces(w, row)
        assert len(addr) == transfer_pieces(w["n2"], w["n1"], w["chunk"], row)
        # byte by byte: the DRAM address of each packed byte, and its scratchpad row
        dram = [w["dram_addr"] + i2 * w["stride2"] + i1 * w["stride1"] + b
                for i2 in range(w["n2"]) for i1 in range(w["n1"]) for b in range(w["chunk"])]
        walked = np.concatenate([np.arange(a, a + s) for a, s in zip(addr, size)])
        assert walked.tolist() == dram
        packed = np.cumsum(np.concatenate([[0], size]))
        assert (packed[:-1] // row == (packed[1:] - 1) // row).all()
