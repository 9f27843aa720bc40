"""Every command that reads a user file: bad encodings and wrong kinds of path are one line.

Property tests (issue 21, items 9 and 10): random non-UTF-8 bytes inserted into a valid file of
each kind, or the whole file re-encoded as UTF-16 or latin-1, and paths of the wrong kind (a
directory where a file is expected, a file where a directory is expected, a missing path or a
parent that is a file). Each must end with exit status 2 and exactly one stderr line
``npulab: error: ...`` naming the file, before any simulation runs. The CLI runs in-process.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npulab.cli import main

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "sim_configs"
CFG = CONFIGS / "scalesim_32x32_os.cfg"
TOPO = CONFIGS / "scalesim_resnet18.csv"
DDR4_INI = """[dram_structure]
protocol = DDR4
bankgroups = 4
banks_per_group = 4
device_width = 8
[timing]
tCK = 0.63
CL = 22
[system]
channel_size = 16384
channels = 1
bus_width = 64
"""
TRACE = "# a DRAMsim3 trace\n0x40 READ 1\n0x80 WRITE 3\n"
SOC = '[soc]\nname = "pair"\n[[accelerator]]\nconfig = "default"\ncount = 2\n'

# name -> (file name, valid content, argv for the file at PATH with scratch folder TMP)
FILES = {
    "chip TOML (run)": ("chip.toml", (CONFIGS / "default.toml").read_text(),
                        lambda p, t: ["run", "--config", p]),
    "chip TOML (config show)": ("chip.toml", (CONFIGS / "default.toml").read_text(),
                                lambda p, t: ["config", "show", "--config", p]),
    "chip TOML (map)": ("chip.toml", (CONFIGS / "default.toml").read_text(),
                        lambda p, t: ["map", "--config", p, "--gemm", "64,64,64"]),
    "NVDLA TOML": ("nv.toml", (CONFIGS / "nv_small.toml").read_text(),
                   lambda p, t: ["run", "--config", p]),
    "SCALE-Sim cfg": ("my.cfg", CFG.read_text(),
                      lambda p, t: ["scalesim", "-c", p, "-t", str(TOPO), "-o", f"{t}/out"]),
    "topology CSV (scalesim)": ("topo.csv", TOPO.read_text(),
                                lambda p, t: ["scalesim", "-c", str(CFG), "-t", p, "-o",
                                              f"{t}/out"]),
    "topology CSV (run)": ("topo.csv", TOPO.read_text(), lambda p, t: ["run", "--topology", p]),
    "system TOML": ("sys.toml", (CONFIGS / "systems" / "hgx-a100-4.toml").read_text(),
                    lambda p, t: ["system", "--system", p, "--model", "resnet18"]),
    "graph TOML": ("graph.toml", (CONFIGS / "systems" / "dgx1_hybrid_cube_mesh.toml").read_text(),
                   lambda p, t: ["collective", "--system", p, "--op", "allreduce", "--bytes",
                                 "1M"]),
    "sweep TOML": ("spec.toml", (CONFIGS / "sweeps" / "resnet50_shapes.toml").read_text(),
                   lambda p, t: ["sweep", p, "-o", f"{t}/sweep", "-q"]),
    "SoC TOML": ("soc.toml", SOC, lambda p, t: ["soc", "--soc", p]),
    "energy TOML": ("tech.toml", (REPO / "hw" / "energy" / "data" / "16nm.toml").read_text(),
                    lambda p, t: ["run", "--tech", p]),
    "DRAM ini": ("d.ini", DDR4_INI, lambda p, t: ["dram", "replay", f"{t}/ok.trace", "--ini", p]),
    "DRAM trace": ("t.trace", TRACE, lambda p, t: ["dram", "replay", p]),
    "summary JSON": ("summary.json", "{}\n", lambda p, t: ["report", str(Path(p).parent)]),
}


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# 1-4 bytes that are not UTF-8 on their own (so not inside an ASCII file either): mostly
# bytes >= 0x80 (latin-1 letters, stray 0xff, broken sequences), some ASCII mixed in
JUNK = st.lists(st.one_of(st.integers(0x80, 0xFF), st.integers(0x80, 0xFF), st.integers(0, 0x7F)),
                min_size=1, max_size=4).map(bytes).filter(lambda b: not _is_utf8(b))


def _one_error_line(capsys, code: int, path) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("npulab: error: "), captured.err
    assert str(path) in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


def _fresh(scratch: Path, key: str) -> Path:
    """An empty folder for one example (the scratch folder outlives hypothesis examples)."""
    t = scratch / key.replace(" ", "_").replace("(", "").replace(")", "")
    shutil.rmtree(t, ignore_errors=True)
    t.mkdir(parents=True)
    (t / "ok.trace").write_text(TRACE)
    return t


@pytest.mark.parametrize("kind", sorted(FILES))
def test_valid_base_files_are_accepted_by_the_reader(kind, tmp_path):
    """The bases below are valid UTF-8: each error in the property test comes from the bytes."""
    from hw.files import read_text
    name, text, _ = FILES[kind]
    (tmp_path / name).write_text(text, encoding="utf-8")
    assert read_text(tmp_path / name) == text


@pytest.mark.parametrize("kind", sorted(FILES))
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_non_utf8_input_is_one_line_naming_the_file(kind, data, scratch, capsys):
    name, text, argv = FILES[kind]
    raw = text.encode("utf-8")
    how = data.draw(st.sampled_from(["insert", "utf-16", "latin-1"]), label="how")
    if how == "insert":
        junk = data.draw(JUNK, label="junk")
        at = data.draw(st.integers(0, len(raw)), label="at")
        raw = raw[:at] + junk + raw[at:]
    elif how == "utf-16":
        raw = text.encode("utf-16")
    else:
        raw = raw.replace(b"\n", " caf\u00e9\n".encode("latin-1"), 1)  # a comment/cell: é
    t = _fresh(scratch, kind)
    path = t / name
    path.write_bytes(raw)
    line = _one_error_line(capsys, main(argv(str(path), str(t))), path)
    assert "UTF-8" in line, line
    assert not (t / "out").exists() and not (t / "sweep").exists()  # nothing was run


# ---- wrong kinds of path -----------------------------------------------------------------------
# case -> (role, suffix of the path, argv with the path): role "in" = an input file, "indir" = an
# input folder, "out" = an output folder, "outfile" = an output file. A suffix ".toml" makes the
# argument a path, not a preset name. "T" is a trace file in the current folder.
PATHS = {
    "run --topology": ("in", "", lambda p: ["run", "--topology", p]),
    "run --onnx": ("in", "", lambda p: ["run", "--onnx", p]),
    "run --config": ("in", ".toml", lambda p: ["run", "--config", p]),
    "run --tech": ("in", ".toml", lambda p: ["run", "--tech", p]),
    "run -o": ("out", "", lambda p: ["run", "--topology", str(TOPO), "-o", p]),
    "scalesim -c": ("in", "", lambda p: ["scalesim", "-c", p, "-t", str(TOPO), "-o", "unused"]),
    "scalesim -t": ("in", "", lambda p: ["scalesim", "-c", str(CFG), "-t", p, "-o", "unused"]),
    "scalesim -o": ("out", "", lambda p: ["scalesim", "-c", str(CFG), "-t", str(TOPO), "-o", p]),
    "config show --config": ("in", ".toml", lambda p: ["config", "show", "--config", p]),
    "dram replay TRACE": ("in", "", lambda p: ["dram", "replay", p]),
    "dram replay --ini": ("in", "", lambda p: ["dram", "replay", "T", "--ini", p]),
    "dram replay --per-request": ("outfile", "", lambda p: ["dram", "replay", "T",
                                                            "--per-request", p]),
    "system --system": ("in", ".toml", lambda p: ["system", "--system", p, "--model",
                                                  "resnet18"]),
    "collective --system": ("in", ".toml", lambda p: ["collective", "--system", p, "--op",
                                                      "allreduce", "--bytes", "1M"]),
    "soc --soc": ("in", "", lambda p: ["soc", "--soc", p]),
    "sweep SPEC": ("in", ".toml", lambda p: ["sweep", p]),
    "sweep -o": ("out", "", lambda p: ["sweep", str(CONFIGS / "sweeps" / "resnet50_shapes.toml"),
                                       "-o", p]),
    "nvdla trace --dump": ("out", "", lambda p: ["nvdla", "trace", "T", "--dump", p]),
    "rtl verilog -o": ("outfile", "", lambda p: ["rtl", "verilog", "-o", p]),
    "rtl wave -o": ("out", "", lambda p: ["rtl", "wave", "-o", p]),
    "report DIR": ("indir", "", lambda p: ["report", p]),
}
# the wrong kinds of path for each role
WRONG = {
    "in": ("directory", "missing", "under a file"),
    "indir": ("file", "missing", "under a file"),
    "out": ("file", "under a file"),
    "outfile": ("directory", "under a file", "missing parent"),
}


def _wrong_path(t: Path, kind: str, name: str) -> Path:
    if kind == "directory":
        (t / name).mkdir()
    elif kind == "file":
        (t / name).write_text("x\n")
    elif kind == "missing parent":
        return t / "no" / name
    elif kind == "under a file":
        (t / "plain").write_text("x\n")
        return t / "plain" / name
    return t / name


@pytest.mark.parametrize("case", sorted(PATHS))
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(),
       stem=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=8))
def test_wrong_kind_of_path_is_one_line_before_any_work(case, data, stem, scratch, capsys,
                                                        monkeypatch):
    role, suffix, argv = PATHS[case]
    kind = data.draw(st.sampled_from(WRONG[role]), label="kind")
    t = _fresh(scratch, case)
    (t / "T").write_text(TRACE)  # the dram cases' trace; for nvdla trace a non-trace file
    path = _wrong_path(t, kind, stem + suffix)
    with monkeypatch.context() as m:
        m.chdir(t)  # "T" and default output folders are relative to the scratch folder
        code = main(argv(str(path)))
    _one_error_line(capsys, code, path)
    expected = {"T", "ok.trace"}
    if kind in ("directory", "file"):
        expected.add(path.name)
    if kind == "under a file":
        expected.add("plain")
    assert {p.name for p in t.iterdir()} == expected, "a command created files before failing"


# ---- NVDLA trace tests: a file that cannot be read fails that test, named, and the run goes on
@pytest.mark.parametrize("bad", ["cfg", "dat"])
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=JUNK)
def test_nvdla_trace_files_with_bad_bytes_fail_their_test_naming_the_file(bad, junk, scratch,
                                                                         capsys):
    t = _fresh(scratch, f"nvdla_{bad}")
    folder = t / "t"
    folder.mkdir()
    cfg = folder / "t.cfg"
    dat = folder / "t_in.dat"
    cfg_text = b'// caf\n mem_load(pri_mem, 0x80000000, "t_in.dat");\ncheck_nothing(s);\n'
    dat_text = b"{\n{offset:0x0, size:2, payload:0x01 0x02} ,\n}\n"
    cfg.write_bytes(cfg_text.replace(b"caf", b"caf" + junk) if bad == "cfg" else cfg_text)
    dat.write_bytes(dat_text.replace(b"{\n{", b"{\n" + junk + b"{") if bad == "dat" else dat_text)
    assert main(["nvdla", "trace", str(folder)]) == 1  # a failed test, as a wrong CRC is
    out = capsys.readouterr().out.splitlines()
    path = cfg if bad == "cfg" else dat
    assert out[0].startswith(f"FAIL t: {path}:") and "is not UTF-8" in out[0], out
    assert out[-1] == "0 passed, 1 failed"
