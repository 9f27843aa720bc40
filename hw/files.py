"""User files: the one reader of text inputs and the path checks every command makes.

Every text file npulab reads from a user (chip, system, graph, SoC, sweep and energy TOML,
SCALE-Sim ``.cfg`` and topology CSV, DRAMsim3 ``.ini`` and traces, NVDLA trace ``.cfg`` and
``.dat`` files, ``summary.json``) goes through :func:`read_text`, so one rule holds everywhere:

* **Encoding.** Text inputs are UTF-8 (plain ASCII is UTF-8). A UTF-8 byte-order mark (what
  spreadsheet programs and Windows editors put first) is skipped. UTF-16 and UTF-32 files
  (byte-order mark ``FF FE`` or ``FE FF``, PowerShell's default) are refused rather than
  decoded, as are latin-1 bytes such as ``0xe9`` or a stray ``0xff``: SCALE-Sim, DRAMsim3 and
  NVIDIA's trace tools read these files as UTF-8 or ASCII too, so a file npulab accepted would
  still fail there. The error names the file, the line, the byte and its offset.
* **Paths.** A missing path, a directory where a file is expected or an unreadable file is an
  error naming the path (:func:`check_input_file` makes the same checks without reading, for a
  file a command reads only after simulating). :func:`check_output_dir` and
  :func:`check_output_file` check, before any work is done, that an output can be written:
  not a file where a directory is expected (or the reverse), a parent that is a directory, write
  permission.

Every check raises ``error`` (default :class:`~hw.systolic.config.ConfigError`; readers pass
their own subclass of ``ValueError``, e.g. a ``TopologyError``) with a one-line message that
starts with the path.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from pathlib import Path

from hw.systolic.config import ConfigError

__all__ = ["ENCODING_RULE", "read_text", "decode_text", "csv_table", "check_input_file",
           "check_output_dir", "check_output_file"]

#: What every text input must be, as error messages and the docs say it.
ENCODING_RULE = "text inputs must be UTF-8 (ASCII is UTF-8; a UTF-8 byte-order mark is allowed)"

_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def _a(what: str) -> str:
    """``what`` with its indefinite article (an ONNX model, a topology CSV)."""
    return f"{'an' if what[:1].lower() in 'aeio' else 'a'} {what}"


def _label(path, flag: str | None) -> str:
    return f"{flag} {path}" if flag else str(path)


def _read_error(path, exc: OSError, what: str, missing: str | None, flag: str | None,
                error: type[Exception]) -> Exception:
    """The one-line error for an OSError raised while opening or reading ``path``."""
    where = _label(path, flag)
    if isinstance(exc, FileNotFoundError):
        return error(f"{where}: {missing or f'no such {what}'}")
    if isinstance(exc, IsADirectoryError) or Path(path).is_dir():
        return error(f"{where}: is a directory; expected {_a(what)}")
    if isinstance(exc, NotADirectoryError):
        return error(f"{where}: {missing or f'no such {what}'} (a parent of it is a file, "
                     f"not a directory)")
    if isinstance(exc, PermissionError):
        return error(f"{where}: cannot read the {what}: permission denied")
    return error(f"{where}: cannot read the {what}: {exc.strerror or exc}")


def check_input_file(path, what: str = "file", *, missing: str | None = None,
                     flag: str | None = None, error: type[Exception] = ConfigError) -> Path:
    """``path`` as a Path after checking that it names a readable file (not a directory).

    ``what`` names the kind of file in messages (``"topology CSV"``); ``missing`` replaces
    ``"no such <what>"``; ``flag`` (``"--topology"``) is put before the path in messages.
    """
    p = Path(path)
    try:
        st = os.stat(p)  # no open(): a named pipe would block
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(p))
        if not os.access(p, os.R_OK):
            raise PermissionError(errno.EACCES, "permission denied", str(p))
    except OSError as exc:
        raise _read_error(path, exc, what, missing, flag, error) from None
    return p


def decode_text(data: bytes, where: str, *, error: type[Exception] = ConfigError) -> str:
    """``data`` (the bytes of the file ``where``) decoded by the rule in the module doc; an
    error's offset counts from the start of the file (a byte-order mark included)."""
    skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    for bom, name in _WIDE_BOMS:
        if data.startswith(bom):
            raise error(f"{where}: {name} text (byte-order mark {bom.hex(' ').upper()}); "
                        f"{ENCODING_RULE}: save it as UTF-8")
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{_at(where, data, skip + exc.start)} is not UTF-8; {ENCODING_RULE}: save "
                    f"it as UTF-8 (from latin-1: iconv -f latin1 -t utf-8)") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise error(f"{_at(where, data, nul)}: a text file has no NUL bytes (UTF-16 without a "
                    f"byte-order mark, or a binary file?); {ENCODING_RULE}")
    return text


def _at(where: str, data: bytes, offset: int) -> str:
    """``file:line: byte 0xNN (offset N, column N)`` for the byte at ``offset``."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - data.rfind(b"\n", 0, offset)
    return f"{where}:{line}: byte 0x{data[offset]:02x} (offset {offset}, column {column})"


def csv_table(text: str) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """A CSV text as its header (names stripped; None for a text without lines) and its data
    rows with their 1-based line numbers, blank rows left out."""
    import csv
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        return None, []
    return ([h.strip() for h in rows[0]],
            [(line, row) for line, row in enumerate(rows[1:], 2)
             if any(cell.strip() for cell in row)])


def read_text(path, what: str = "file", *, missing: str | None = None, flag: str | None = None,
              error: type[Exception] = ConfigError) -> str:
    """The text of the user file ``path``, by the rules in the module doc.

    Line endings are kept as they are in the file (``str.splitlines`` handles all of them).
    ``what``, ``missing``, ``flag`` and ``error`` are as in :func:`check_input_file`.
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(p))
        data = p.read_bytes()
    except OSError as exc:
        raise _read_error(path, exc, what, missing, flag, error) from None
    return decode_text(data, _label(path, flag), error=error)


def _writable_ancestor(p: Path, what: str, where: str, error: type[Exception]) -> None:
    """The nearest existing ancestor of ``p`` must be a writable directory."""
    for parent in p.absolute().parents:
        if parent.exists():
            break
    else:  # pragma: no cover - the root always exists
        return
    if not parent.is_dir():
        raise error(f"{where}: cannot create the {what}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise error(f"{where}: cannot create the {what}: {parent} is not writable")


def check_output_dir(path, what: str = "output directory", *, flag: str | None = None,
                     error: type[Exception] = ConfigError) -> Path:
    """``path`` as a Path after checking that it is, or can be created as, a writable directory.

    Nothing is created: a command calls this before it starts work and creates the directory
    when it writes.
    """
    p = Path(path)
    where = _label(path, flag)
    if p.is_symlink() and not p.exists():
        raise error(f"{where}: a dangling symbolic link; expected {_a(what)}")
    if p.exists():
        if not p.is_dir():
            raise error(f"{where}: exists and is not a directory; expected {_a(what)}")
        if not os.access(p, os.W_OK | os.X_OK):
            raise error(f"{where}: cannot write into the {what}: permission denied")
        return p
    _writable_ancestor(p, what, where, error)
    return p


def check_output_file(path, what: str = "output file", *, flag: str | None = None,
                      error: type[Exception] = ConfigError) -> Path:
    """``path`` as a Path after checking that a file can be written there: not a directory, in
    an existing directory, writable. Nothing is created."""
    p = Path(path)
    where = _label(path, flag)
    if p.is_dir():
        raise error(f"{where}: is a directory; expected {_a(what)}")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise error(f"{where}: cannot write the {what}: permission denied")
        return p
    parent = p.absolute().parent
    if not parent.is_dir():
        state = "is a file" if parent.exists() else "does not exist"
        raise error(f"{where}: cannot write the {what}: {parent} {state}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise error(f"{where}: cannot write the {what}: {parent} is not writable")
    return p
