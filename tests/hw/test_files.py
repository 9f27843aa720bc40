"""hw.files: the one reader of user text files (UTF-8 rule) and the input/output path checks.

The gold for decoding is Python's own UTF-8 codec: a byte string is accepted exactly when
``bytes.decode("utf-8")`` accepts it (after an optional UTF-8 byte-order mark), and the reported
offset is the codec's first bad byte, the line the number of newlines before it plus one.
"""

from __future__ import annotations

import codecs
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.files import (check_input_file, check_output_dir, check_output_file, decode_text,
                      read_text)
from hw.systolic.config import ConfigError

TEXT = "[array]\nrows = 16\n# a comment\ncols = 16\n"


class MyError(ValueError):
    """A caller's own error type (e.g. a TopologyError)."""


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_utf8_and_bom_are_read(tmp_path):
    p = tmp_path / "c.toml"
    p.write_bytes(TEXT.encode())
    assert read_text(p) == TEXT
    p.write_bytes(codecs.BOM_UTF8 + "name = \"caf\u00e9\"\r\n".encode())
    assert read_text(p) == "name = \"caf\u00e9\"\r\n"  # BOM dropped, line ends kept


@pytest.mark.parametrize("encoding, start", [
    ("utf-16", "UTF-16 text (byte-order mark FF FE)"),
    ("utf-32", "UTF-32 text (byte-order mark FF FE 00 00)"),
    ("utf-16-be", ":1: byte 0x00 (offset 0, column 1): a text file has no NUL bytes"),
    ("utf-16-le", ":1: byte 0x00 (offset 1, column 2): a text file has no NUL bytes"),
])
def test_wide_encodings_are_refused_naming_the_file(tmp_path, encoding, start):
    p = tmp_path / "c.toml"
    p.write_bytes(TEXT.encode(encoding))  # "utf-16"/"utf-32": with a BOM; -be/-le: without
    with pytest.raises(ConfigError) as exc:
        read_text(p, "chip config")
    msg = str(exc.value)
    assert msg.startswith(f"{p}{'' if start[0] == ':' else ': '}{start}") and "\n" not in msg
    assert "must be UTF-8" in msg


def test_latin1_is_refused_with_line_column_and_offset(tmp_path):
    p = tmp_path / "topo.csv"
    p.write_bytes("Layer, M, N, K,\ncaf\u00e9, 1, 2, 3,\n".encode("latin-1"))
    with pytest.raises(MyError) as exc:
        read_text(p, "topology CSV", error=MyError)
    assert str(exc.value).startswith(f"{p}:2: byte 0xe9 (offset 19, column 4) is not UTF-8; "
                                     f"text inputs must be UTF-8")


@settings(max_examples=60, deadline=None)
@given(before=st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=60),
       junk=st.binary(min_size=1, max_size=6).filter(lambda b: not _is_utf8(b)),
       after=st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=20))
def test_any_non_utf8_bytes_are_reported_where_the_codec_stops(before, junk, after):
    data = before.encode() + junk + after.encode()
    with pytest.raises(ConfigError) as exc:
        decode_text(data, "f.txt")
    msg = str(exc.value)
    assert "\n" not in msg
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        assert msg.startswith("f.txt: UTF-")
        return
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    with pytest.raises(UnicodeDecodeError) as codec:
        data[bom:].decode("utf-8")
    offset = bom + codec.value.start
    line = data.count(b"\n", 0, offset) + 1
    column = offset - data.rfind(b"\n", 0, offset)
    assert msg.startswith(f"f.txt:{line}: byte 0x{data[offset]:02x} (offset {offset}, column "
                          f"{column}) is not UTF-8")


def test_input_path_kinds(tmp_path):
    good = tmp_path / "a.cfg"
    good.write_text("x")
    assert check_input_file(good) == good
    with pytest.raises(ConfigError, match=f"^{tmp_path}: is a directory; expected an ONNX model$"):
        check_input_file(tmp_path, "ONNX model")
    with pytest.raises(ConfigError, match=f"^{tmp_path}: is a directory; expected a topology CSV$"):
        read_text(tmp_path, "topology CSV")
    with pytest.raises(MyError, match="nope.csv: no such topology CSV$"):
        check_input_file(tmp_path / "nope.csv", "topology CSV", error=MyError)
    with pytest.raises(ConfigError, match="^--ini .*nope.ini: no such DRAMsim3 file$"):
        read_text(tmp_path / "nope.ini", flag="--ini", missing="no such DRAMsim3 file")
    with pytest.raises(ConfigError, match=r"a.cfg/x.toml: no such file \(a parent of it is a "
                                          r"file, not a directory\)$"):
        read_text(good / "x.toml")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes everything")
def test_unreadable_and_unwritable(tmp_path):
    secret = tmp_path / "secret.toml"
    secret.write_text("x")
    secret.chmod(0)
    with pytest.raises(ConfigError, match="secret.toml: cannot read the file: permission denied"):
        read_text(secret)
    with pytest.raises(ConfigError, match="secret.toml: cannot read the file: permission denied"):
        check_input_file(secret)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="cannot write into the output directory"):
            check_output_dir(locked)
        with pytest.raises(ConfigError, match="cannot create the output directory: .*locked is "
                                              "not writable"):
            check_output_dir(locked / "out" / "deeper")
    finally:
        locked.chmod(0o700)


def test_output_dir_kinds(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert check_output_dir(tmp_path) == tmp_path
    assert check_output_dir(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, not created
    with pytest.raises(ConfigError, match=f"^-o {a_file}: exists and is not a directory; "
                                          f"expected an output directory$"):
        check_output_dir(a_file, flag="-o")
    with pytest.raises(ConfigError, match=f"cannot create the output directory: {a_file} is a "
                                          f"file, not a directory$"):
        check_output_dir(a_file / "sub" / "x")
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="dangling symbolic link"):
        check_output_dir(link)


def test_output_file_kinds(tmp_path):
    assert check_output_file(tmp_path / "x.v") == tmp_path / "x.v"
    with pytest.raises(ConfigError, match=f"^{tmp_path}: is a directory; expected a Verilog file$"):
        check_output_file(tmp_path, "Verilog file")
    with pytest.raises(ConfigError, match=f"cannot write the output file: {tmp_path / 'no'} does "
                                          f"not exist$"):
        check_output_file(tmp_path / "no" / "x.v")
