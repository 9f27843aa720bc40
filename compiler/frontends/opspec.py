"""One op written as text: ``--gemm M,N,K`` and ``--conv SPEC`` (``npulab run`` and ``npulab map``).

The conv grammar (case-insensitive) is :data:`CONV_SYNTAX`: ``HxWxCIN-COUTkKH[xKW][sSTRIDE]
[pPAD][gGROUPS]``, ``HxCIN-...`` for a square input. Errors are :class:`OpSpecError` (an
:class:`~compiler.ir.IRError`), one line naming the option and the value. Imports only ``re``
at load time: the command line's parsers use :data:`CONV_SYNTAX`.
"""

from __future__ import annotations

import re

from compiler.ir import Gemm, IRError, conv2d

__all__ = ["CONV_SYNTAX", "OpSpecError", "parse_gemm", "parse_conv", "op_from_spec", "int_option"]

CONV_RE = re.compile(
    r"^(?P<h>\d+)x(?:(?P<w>\d+)x)?(?P<cin>\d+)-(?P<cout>\d+)"
    r"k(?P<kh>\d+)(?:x(?P<kw>\d+))?(?:s(?P<s>\d+))?(?:p(?P<p>\d+))?(?:g(?P<g>\d+))?$",
    re.IGNORECASE)
CONV_SYNTAX = ("HxWxCIN-COUTkKH[xKW][sSTRIDE][pPAD][gGROUPS] (HxCIN-... for a square input), "
                "e.g. 56x56x64-64k3s1p1")



class OpSpecError(IRError):
    """A ``--gemm``/``--conv``/``--batch`` value that is not an op."""


def int_option(option: str, value, lo: int) -> int | None:
    """``value`` (text or int; ``_`` separators allowed) as an integer >= ``lo``, None when not
    given; an :class:`OpSpecError` naming ``option`` otherwise."""
    if value is None:
        return None
    try:
        number = int(str(value).replace("_", ""))
    except ValueError:
        number = None
    if number is None or number < lo:
        raise OpSpecError(f"{option} {value}: must be an integer >= {lo}")
    return number


def parse_gemm(spec: str):
    """``"M,N,K"`` -> ``(m, n, k)``, three integers >= 1."""
    parts = [x.strip() for x in spec.split(",")]
    try:
        m, n, k = (int(x) for x in parts)
    except ValueError:
        raise OpSpecError(f"--gemm {spec}: expected M,N,K, three integers >= 1 (e.g. --gemm "
                     f"512,768,768)") from None
    if min(m, n, k) < 1:
        raise OpSpecError(f"--gemm {spec}: M, N and K must be integers >= 1 (e.g. --gemm "
                     f"512,768,768)")
    return m, n, k


def parse_conv(spec: str) -> dict:
    """A convolution spec -> :func:`compiler.ir.conv2d` keyword arguments.

    Grammar (case-insensitive): ``HxWxCIN-COUTkKH[xKW][sSTRIDE][pPAD][gGROUPS]``; ``HxCIN-...``
    for a square input. ``56x56x64-64k3s1p1`` is ResNet-18's conv2_1 (56x56 input, 64 -> 64
    channels, 3x3 kernel, stride 1, padding 1); stride defaults to 1, padding to 0, groups to 1
    (``112x112x32-32k3p1g32`` is a depthwise 3x3)."""
    mt = CONV_RE.match(spec.strip())
    if mt is None:
        raise OpSpecError(f"--conv {spec}: expected {CONV_SYNTAX}")
    v = {key: (int(x) if x is not None else None) for key, x in mt.groupdict().items()}
    h = v["h"]
    w = v["w"] if v["w"] is not None else h
    kh = v["kh"]
    kw = v["kw"] if v["kw"] is not None else kh
    return dict(in_hw=(h, w), in_channels=v["cin"], out_channels=v["cout"], kernel=(kh, kw),
                stride=v["s"] if v["s"] is not None else 1,
                padding=v["p"] if v["p"] is not None else 0,
                groups=v["g"] if v["g"] is not None else 1)


def op_from_spec(gemm: str | None, conv: str | None, batch: int | None):
    """The op of ``--gemm M,N,K`` or ``--conv SPEC`` (``npulab run`` and ``npulab map`` read
    them alike): a :class:`compiler.ir.Gemm` named ``gemm MxNxK`` or a conv named ``conv SPEC``,
    ``batch`` (default 1) independent GEMMs or images."""
    batch = int_option("--batch", batch, 1) or 1
    try:
        if gemm:
            m, n, k = parse_gemm(gemm)
            return Gemm(name=f"gemm {m}x{n}x{k}", m=m, n=n, k=k, batch=batch)
        return conv2d(f"conv {conv.strip()}", batch=batch, **parse_conv(conv))
    except OpSpecError:
        raise
    except IRError as exc:
        raise OpSpecError(f"{'--gemm ' + gemm if gemm else '--conv ' + conv}: {exc}") from None
