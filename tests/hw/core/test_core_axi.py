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
    """``n`` pieces of 1 to ``row`` bytes in [lo, hi): two in five across a 4 KB line, one in
    ten ending on one."""
    out = []
    for _ in range(n):
        line = 4096 * int(rng.integers(lo // 4096 + 1, hi // 4096))
        u = rng.random()
        if u < 0.4:
            before = int(rng.integers(1, row))
            out.append((line - before, int(rng.integers(before + 1, row + 1))))
        elif u < 0.5:
            size = int(rng.integers(1, row + 1))
            out.append((line - size, size))
        else:
            out.append((int(rng.integers(lo, hi - row)), int(rng.integers(1, row + 1))))
    return out


def _every_piece(row: int, width: int, lo: int) -> list[tuple[int, int]]:
    """Every offset in a beat x every length, and every start just below a 4 KB line x
    every length, from ``lo``."""
    grid = [(lo + 64 + off, size) for off in range(width) for size in range(1, row + 1)]
    line = lo + 4096
    return grid + [(line - before, size) for before in range(1, row + 1)
                   for size in range(1, row + 1)]


def _expected_bursts(kind: str, pieces, width: int) -> list[tuple[str, int, int]]:
    """(kind, address, beats) of each burst: a piece's aligned beats, split at 4 KB."""
    out = []
    for a, b in pieces:
        first, last = a - a % width, a + b - 1 - (a + b - 1) % width
        beats = (last - first) // width + 1
        head = min(beats, (4096 - first % 4096) // width)
        out.append((kind, first, head))
        if head < beats:
            out.append((kind, first + head * width, beats - head))
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
                  seed: int = 0, every: bool = False, wait_for_both: bool = False):
    """Reads from the lower half and writes to the upper half of a 16 KiB memory, side by
    side, through the bridge (``n`` random pieces each, or ``every`` piece); returns (memory
    after, numpy's memory, reads got, reads wanted, slave, read pieces, write pieces)."""
    rng = np.random.default_rng(seed)
    size = 4 * 4096
    mem = rng.integers(0, 256, size, dtype=np.uint8)
    want_mem = mem.copy()
    dut = AxiBridge(row, width)
    slave = AxiMemory(dut.axi, mem, width, latency=latency, stall=stall, seed=seed + 1,
                      wait_for_both=wait_for_both)
    if every:
        reads, writes = _every_piece(row, width, 0), _every_piece(row, width, size // 2)
        n = len(reads)
    else:
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
        ctx.set(dut.mem_rd.valid, 0)
        ctx.set(dut.mem_wr.valid, 0)
        for _ in range(2):                  # nothing is left: the slave is idle
            slave.step(ctx)
            await ctx.tick()
        slave.check_idle()

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
    # every piece was a burst of its aligned beats or, across a 4 KB line, two
    assert [x for x in slave.log if x[0] == "read"] == _expected_bursts("read", reads, width)
    assert [x for x in slave.log if x[0] == "write"] == _expected_bursts("write", writes, width)
    assert min(slave.bursts.values()) > 45


@pytest.mark.parametrize("row,width", [(8, 8), (16, 4)])
def test_every_offset_and_length_with_a_slave_that_waits_for_address_and_data(row, width):
    """Each piece at every offset and length, and across and up to a 4 KB line; the slave
    takes a write address only with its data and data only with an address (A3.3.1)."""
    mem, want_mem, got, want, slave, reads, writes = _drive_bridge(
        row, width, stall=0.2, latency=1, every=True, wait_for_both=True)
    assert got == want and np.array_equal(mem, want_mem)
    assert [x for x in slave.log if x[0] == "read"] == _expected_bursts("read", reads, width)
    assert [x for x in slave.log if x[0] == "write"] == _expected_bursts("write", writes, width)


def test_the_bridge_without_latency_or_stalls_takes_four_cycles_a_piece():
    """One burst in flight per direction: request, address, data, answer (docs/core.md),
    reads and writes side by side."""
    mem, want_mem, got, want, slave, reads, writes = _drive_bridge(8, 8, stall=0.0, latency=0,
                                                                   n=30, seed=3)
    assert got == want and np.array_equal(mem, want_mem)
    assert slave.t - 2 == max(_cycles(reads, 8), _cycles(writes, 8))     # 2: check_idle's wait


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
    """A memory too small for the program's output (then for its input too): the slave
    answers the stores (and the loads) with SLVERR, STATUS bit 3 is set, the run ends."""
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
    assert core_sim.run(core, image[:40], port="axi").axi_error         # loads fail too
    v = cosim.verify(program, graph, chip, {"<input>": np.arange(-50, 50, dtype=np.int8)},
                     memory={"port": "axi"})
    assert v.ok and not v.run.axi_error


def _read_once(piece: tuple[int, int], beats: list[tuple[int, int, int]]):
    """One read of ``piece`` through the bridge from a scripted slave that sends ``beats``
    ((data, resp, last) each) and nothing more; returns (answered, error, data), then the
    error after a ``clear``."""
    dut = AxiBridge(8, 8)
    out = {}

    async def bench(ctx):
        ctx.set(dut.mem_rd.valid, 1)
        ctx.set(dut.mem_rd.payload, {"addr": piece[0], "bytes": piece[1]})
        ctx.set(dut.axi.ar.ready, 1)
        left = list(beats)
        for _ in range(30):
            give = bool(left) and ctx.get(dut.axi.r.ready)
            if give:
                data, resp, last = left.pop(0)
                ctx.set(dut.axi.r.data, data)
                ctx.set(dut.axi.r.resp, resp)
                ctx.set(dut.axi.r.last, last)
            ctx.set(dut.axi.r.valid, give)
            if ctx.get(dut.mem_rd.ready):
                out["data"] = ctx.get(dut.mem_rd_data) & ((1 << 8 * piece[1]) - 1)
                ctx.set(dut.mem_rd.valid, 0)
            await ctx.tick()
        out["error"] = ctx.get(dut.error)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        out["cleared"] = ctx.get(dut.error)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return "data" in out, out["error"], out.get("data"), out["cleared"]


def test_read_errors_set_the_flag_and_the_bridge_goes_on():
    lo, hi = 0x0807060504030201, 0x100F0E0D0C0B0A09
    # 8 bytes from address 4: two beats, the data from byte 4 of the first
    assert _read_once((4, 8), [(lo, 0, 0), (hi, 0, 1)]) == (True, 0, 0x0C0B0A0908070605, 0)
    assert _read_once((0, 8), [(lo, 3, 1)])[:3] == (True, 1, lo)            # DECERR
    assert _read_once((0, 8), [(lo, 2, 1)])[:2] == (True, 1)                # SLVERR
    # an early rlast ends the burst (no hang), a missing one is flagged; clear clears
    assert _read_once((4, 8), [(lo, 0, 1)]) == (True, 1, 0x08070605, 0)
    assert _read_once((0, 8), [(lo, 0, 0)])[:2] == (True, 1)


def test_a_piece_of_no_bytes_is_answered_without_a_transfer():
    dut = AxiBridge(8, 8)
    slave = AxiMemory(dut.axi, np.zeros(64, np.uint8), 8)
    answered = []

    async def bench(ctx):
        ctx.set(dut.mem_rd.valid, 1)
        ctx.set(dut.mem_wr.valid, 1)     # payloads: address 0, 0 bytes
        for _ in range(4):
            slave.step(ctx)
            answered.append((ctx.get(dut.mem_rd.ready), ctx.get(dut.mem_wr.ready)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert answered == [(0, 0), (1, 1), (0, 0), (1, 1)] and slave.log == []


class _Master(wiring.Component):
    """An AXI4 master port driven by the testbench, to break the rules on purpose."""

    def __init__(self):
        super().__init__({"axi": Out(axi4_signature(8))})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        return m


def _broken(steps, stall: float = 0.0, wait_for_both: bool = False) -> str:
    """Run ``steps`` (per cycle: {channel: {signal: value}}, or ``"idle"``: the end of the
    run) against the checking slave and return its complaint."""
    dut = _Master()
    slave = AxiMemory(dut.axi, np.zeros(16384, np.uint8), 8, latency=0, stall=stall,
                      wait_for_both=wait_for_both)

    async def bench(ctx):
        for step in steps:
            if step == "idle":
                slave.check_idle()
                continue
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
    aw = {"valid": 1, "addr": 0, "len": 3, "size": 3, "burst": 1}
    # an early wlast is named when it arrives, not when the burst would end
    assert "cycle 0: wlast set on beat 1 of a 4-beat" in _broken(
        [{"aw": aw, "w": {"valid": 1, "last": 1}}, {"aw": {"valid": 0}}, {}])
    assert "payload changed" in _broken([{"aw": {**aw, "len": 0, "cache": 3}},
                                         {"aw": {"cache": 0}}], stall=0.999999)
    # a stray data beat, and a burst whose data never came, are left at the end
    assert "1 write data beats without an address" in _broken(
        [{"w": {"valid": 1, "last": 1}}, {"w": {"valid": 0}}, "idle"])
    assert "1 write addresses without all their data" in _broken(
        [{"aw": aw}, {"aw": {"valid": 0}}, "idle"])
    # a slave that waits for both: an address alone is never taken
    assert "1 valids still waiting for ready" in _broken(
        [{"aw": {**aw, "len": 0}}] * 20 + ["idle"], wait_for_both=True)


def test_bad_settings_are_one_line_errors(chip):
    with pytest.raises(ValueError, match=r"data_bytes = 3: allowed are 4, 8, 16, 32, 64 and 128"):
        AxiBridge(8, 3)
    with pytest.raises(ValueError, match=r"a 1024-byte row needs bursts of up to 257 beats, "
                                         r"AXI4 allows 256"):
        AxiBridge(1024, 4)
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
