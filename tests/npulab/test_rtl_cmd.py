"""``npulab rtl verilog|synth|verify`` (npulab/rtl_cmd.py)."""

from __future__ import annotations

import json

import pytest

from hw.systolic.config import ArrayConfig
from hw.systolic.rtl.synth import expected_flip_flops
from npulab.cli import main


def test_verilog_to_file(tmp_path, capsys):
    out = tmp_path / "array.v"
    assert main(["rtl", "verilog", "--rows", "2", "--cols", "3", "--dataflow", "os",
                 "--precision", "int16", "-o", str(out)]) == 0
    text = out.read_text()
    assert "module systolic_os_2x3_int16_acc64(" in text and text.rstrip().endswith("endmodule")
    assert "wrote" in capsys.readouterr().err


def test_synth_json_reports_both_targets(capsys):
    assert main(["rtl", "synth", "--rows", "2", "--cols", "2", "--dataflow", "ws", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    by_target = {r["target"]: r for r in reports}
    assert set(by_target) == {"generic", "ice40"}
    want = expected_flip_flops(ArrayConfig(rows=2, cols=2, dataflow="ws"))
    assert by_target["generic"]["flip_flops"] == want
    assert by_target["ice40"]["dsp"] == 4


def test_synth_table_and_fmax(capsys):
    assert main(["rtl", "synth", "--rows", "1", "--cols", "1", "--target", "ice40", "--fmax"]) == 0
    out = capsys.readouterr().out
    assert "SB_MAC16=1" in out and "fmax_mhz" in out
    fmax = float(out.split("fmax_mhz")[1].split()[0])
    assert 10 < fmax < 300  # iCE40 UP5K fabric: tens to a few hundred MHz


def test_fmax_is_reported_when_it_misses_the_target_frequency():
    # nextpnr exits 1 when the clock misses --freq unless told --timing-allow-fail: the 8x8
    # core on ECP5 (22 MHz against 50) would have raised after an hour of place and route
    from hw.systolic.config import ArrayConfig
    from hw.systolic.rtl.synth import fmax_ice40

    got = fmax_ice40(ArrayConfig(rows=1, cols=1, dataflow="ws"), freq_mhz=2000)
    assert 10 < got["fmax_mhz"] < 2000


def test_fmax_too_big_for_the_device(capsys):
    assert main(["rtl", "synth", "--rows", "3", "--cols", "3", "--target", "ice40", "--fmax"]) == 2
    assert "9 DSP blocks; the iCE40 UP5K has 8" in capsys.readouterr().err


def test_verify_passes_and_fails(tmp_path, capsys):
    assert main(["rtl", "verify", "--rows", "2", "--cols", "3", "--dataflow", "is",
                 "--cases", "3"]) == 0
    assert capsys.readouterr().out.startswith("PASS IS 2x3 int8")
    assert main(["rtl", "verify", "--rows", "2", "--cols", "2", "--cases", "2",
                 "--mutate", "unsigned-multiply", "--vcd", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL WS 2x2") and "mutation=unsigned-multiply" in out
    assert "waveform:" in out and list(tmp_path.glob("*.vcd"))


def _vcd_vars(path) -> set[str]:
    """The signal names a VCD declares (last word of each $var line)."""
    return {line.split()[4].lstrip("\\") for line in path.read_text().splitlines()
            if line.startswith("$var")}


def test_wave_writes_a_passing_run(tmp_path, capsys):
    from hw.systolic.regmodel import run_gemm
    from hw.systolic.rtl.cosim import wave_operands

    assert main(["rtl", "wave", "--rows", "2", "--cols", "2", "--dataflow", "os", "--m", "2",
                 "--k", "3", "--n", "2", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    cfg = ArrayConfig(rows=2, cols=2, dataflow="os")
    a, b = wave_operands(cfg, 2, 3, 2)
    assert a.tolist() == [[1, 2, 3], [4, 5, 6]] and b.tolist() == [[-1, -2], [-3, -4], [-5, -6]]
    # OS closed form (docs/systolic.md): one fold ends at K + 2R + cols_used - 2.
    cycles = run_gemm(cfg, a, b).counters.cycles
    assert cycles == 3 + 2 * 2 + 2 - 2
    assert out.splitlines()[0] == (f"PASS OS 2x2 int8 acc32 wrap: M=2 K=3 N=2 (ramp operands), "
                                   f"{cycles} cycles, every register equal every cycle")
    vcd = tmp_path / "os_2x2_int8_m2_k3_n2.vcd"
    assert vcd.is_file() and vcd.with_suffix(".gtkw").is_file()
    names = _vcd_vars(vcd)
    assert {"acc", "res", "clk", "out__0.valid", "out__1.value"} <= names
    text = vcd.read_text()
    assert "$scope module pe_1_1 $end" in text
    # one rising clock edge per cycle the model recorded (its last write, then the registers
    # settling): the scalar change line '1<clock id>' appears once per cycle
    clk = next(line.split()[3] for line in text.splitlines()
               if line.startswith("$var") and line.split()[4] == "clk")
    recorded = run_gemm(cfg, a, b, snapshots=True).snapshots.shape[0]
    assert recorded >= cycles
    assert text.split("$enddefinitions")[1].splitlines().count("1" + clk) == recorded


def test_wave_ramp_wraps_and_random_operands():
    from hw.systolic.rtl.cosim import wave_operands

    cfg = ArrayConfig(rows=2, cols=2, dataflow="ws")
    a, b = wave_operands(cfg, 16, 16, 16)
    assert a.min() >= -128 and a.max() <= 127 and b.min() >= -128 and b.max() <= 127
    assert a[7, 15] == ((1 + 7 * 16 + 15 + 128) % 256) - 128  # 128 wraps to -128
    r1, r2 = wave_operands(cfg, 3, 3, 3, "random", 5), wave_operands(cfg, 3, 3, 3, "random", 5)
    assert (r1[0] == r2[0]).all() and (r1[1] == r2[1]).all()


def test_wave_with_a_mutation_fails_and_keeps_the_waveform(tmp_path, capsys):
    assert main(["rtl", "wave", "--rows", "2", "--cols", "2", "--m", "2", "--k", "2", "--n", "2",
                 "--mutate", "unsigned-multiply", "-o", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL WS 2x2 int8 acc32 wrap mutation=unsigned-multiply: M=2 K=2 N=2")
    assert "waveform:" in out and (tmp_path / "ws_2x2_int8_m2_k2_n2.vcd").is_file()


@pytest.mark.parametrize("argv,message", [
    (["rtl", "verilog", "--rows", "0"], "--rows = 0: must be an integer in 1..4096"),
    (["rtl", "verilog", "--acc-bits", "8"], "--acc-bits = 8: must be an integer in 16..64"),
    (["rtl", "verify", "--sparse-m", "1"], "--sparse-m = 1: must be 0 (dense PEs) or an integer"),
    (["rtl", "verify", "--precision", "binary", "--macs-per-pe", "3"],
     "--macs-per-pe = 3: must be 1, 2 with int4 operands, or 2, 4 or 8 with binary ones"),
    (["rtl", "verify", "--cases", "0"], "--cases = 0: must be at least 1"),
    (["rtl", "synth", "--rows", "80"], "80 x 4: RTL generation supports up to 64 x 64"),
    (["rtl", "wave", "--m", "0", "-o", "w"], "--m = 0: must be an integer in 1..256"),
])
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npulab: error:") and message in err and "Traceback" not in err


def test_fp16_is_rejected_by_argparse(capsys):
    with pytest.raises(SystemExit):
        main(["rtl", "verilog", "--precision", "fp16"])
    assert "invalid choice: 'fp16'" in capsys.readouterr().err


def test_core_writes_the_verilog_and_the_cocotb_bench(tmp_path, capsys):
    assert main(["rtl", "core", "--lanes", "4", "--kib", "1", "-o", str(tmp_path)]) == 0
    text = (tmp_path / "npulab_core_4x4.v").read_text()
    assert "module npulab_core_4x4(" in text and "mem_rd__payload" in text
    assert "async def run_program(dut)" in (tmp_path / "cocotb_core.py").read_text()
    assert main(["rtl", "core", "--kib", "100", "-o", str(tmp_path)]) == 2
    assert "--kib = 100: must be in 0.25..64" in capsys.readouterr().err


def test_core_with_an_axi_port_writes_only_the_verilog(tmp_path, capsys):
    assert main(["rtl", "core", "--lanes", "4", "--kib", "1", "--axi", "16",
                 "-o", str(tmp_path)]) == 0
    text = (tmp_path / "npulab_core_4x4.v").read_text()
    assert "input [127:0] axi__r__data;" in text and "output [15:0] axi__w__strb;" in text
    header = text[text.index("module npulab_core_4x4("):].split(";")[0]
    assert "axi__ar__addr" in header and "mem_rd" not in header
    assert not (tmp_path / "cocotb_core.py").exists()
    assert "16 bytes per beat" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rtl", "core", "--axi", "12", "-o", str(tmp_path)])
    assert "invalid choice: 12" in capsys.readouterr().err
