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


@pytest.mark.parametrize("argv,message", [
    (["rtl", "verilog", "--rows", "0"], "rows = 0: must be an integer in 1..4096"),
    (["rtl", "verilog", "--acc-bits", "8"], "acc_bits = 8: must be an integer in 16..64"),
    (["rtl", "verify", "--cases", "0"], "--cases = 0: must be at least 1"),
    (["rtl", "synth", "--rows", "80"], "80 x 4: RTL generation supports up to 64 x 64"),
])
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npulab: error:") and message in err and "Traceback" not in err


def test_fp16_is_rejected_by_argparse(capsys):
    with pytest.raises(SystemExit):
        main(["rtl", "verilog", "--precision", "fp16"])
    assert "invalid choice: 'fp16'" in capsys.readouterr().err
