"""One op written as text: ``--gemm M,N,K``, ``--conv SPEC`` (``npulab run`` and ``npulab map``)
and ``--op KIND:DIMS`` (``npulab run``: any op the chip's engines run, :data:`OP_SYNTAX`).

The conv grammar (case-insensitive) is :data:`CONV_SYNTAX`: ``HxWxCIN-COUTkKH[xKW][sSTRIDE]
[pPAD][gGROUPS]``, ``HxCIN-...`` for a square input. Errors are :class:`OpSpecError` (an
:class:`~compiler.ir.IRError`), one line naming the option and the value. Imports only ``re``
at load time: the command line's parsers use :data:`CONV_SYNTAX`.
"""

from __future__ import annotations

import re

from compiler.ir import (
    ACTIVATIONS, BINARY, NORMS, REDUCTIONS, Activation, Binary, Gemm, IRError, Move, Norm, Pool,
    Reduce, Softmax, conv2d,
)

__all__ = ["CONV_SYNTAX", "OP_SYNTAX", "OP_KINDS", "OpSpecError", "parse_gemm", "parse_conv",
           "parse_op", "op_from_spec", "int_option"]

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


POOL_RE = re.compile(r"^(?P<h>\d+)x(?:(?P<w>\d+)x)?(?P<c>\d+)-k(?P<k>\d+)(?:s(?P<s>\d+))?"
                     r"(?:p(?P<p>\d+))?$", re.IGNORECASE)
#: ``--op`` kinds by the dimensions they take.
OP_KINDS = {
    "gemm": "M,N,K",
    "conv": "CONV (as --conv)",
    "softmax": "ROWS,COLS",
    **{kind: "ROWS,COLS" for kind in NORMS},
    **{f"reduce_{fn}": "ROWS,COLS" for fn in REDUCTIONS},
    **{fn: "ELEMENTS" for fn in ACTIVATIONS},
    **{fn: "ELEMENTS" for fn in BINARY if fn not in ACTIVATIONS},
    "maxpool": "HxWxC-kK[sS][pP]",
    "avgpool": "HxWxC-kK[sS][pP]",
    "transpose": "ELEMENTS",
    "concat": "ELEMENTS",
}
OP_SYNTAX = ("KIND:DIMS, e.g. gemm:512,768,768, conv:56x56x64-64k3s1p1, softmax:1536,128, "
             "layernorm:128,768, gelu:393216, add:98304, maxpool:112x112x64-k3s2p1")


def _ints(option: str, text: str, count: int, what: str) -> list[int]:
    parts = [x.strip().replace("_", "") for x in text.split(",")]
    try:
        values = [int(x) for x in parts]
    except ValueError:
        values = []
    if len(values) != count or min(values) < 1:
        raise OpSpecError(f"{option}: expected {what}, {count} integer(s) >= 1")
    return values


def parse_op(spec: str):
    """``--op KIND:DIMS`` as one IR op named after the spec (kinds: :data:`OP_KINDS`)."""
    option = f"--op {spec}"
    kind, sep, dims = str(spec).strip().partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in OP_KINDS:
        raise OpSpecError(f"{option}: expected {OP_SYNTAX}; kinds: {', '.join(OP_KINDS)}")
    name = f"{kind} {dims.strip()}"
    try:
        if kind == "gemm":
            m, n, k = _ints(option, dims, 3, "gemm:M,N,K")
            return Gemm(name=name, m=m, n=n, k=k)
        if kind == "conv":
            return conv2d(name, **parse_conv(dims))
        if kind in ("maxpool", "avgpool"):
            mt = POOL_RE.match(dims.strip())
            if mt is None:
                raise OpSpecError(f"{option}: expected {kind}:HxWxC-kK[sS][pP], e.g. "
                                  f"{kind}:112x112x64-k3s2p1")
            v = {key: (int(x) if x is not None else None) for key, x in mt.groupdict().items()}
            h, w = v["h"], v["w"] if v["w"] is not None else v["h"]
            k, s, p = v["k"], v["s"] or v["k"], v["p"] or 0
            return Pool(name=name, kind=kind[:3], in_h=h, in_w=w, channels=v["c"], kernel_h=k,
                        kernel_w=k, stride_h=s, stride_w=s, pad_top=p, pad_bottom=p,
                        pad_left=p, pad_right=p)
        if OP_KINDS[kind] == "ROWS,COLS":
            rows, cols = _ints(option, dims, 2, f"{kind}:ROWS,COLS")
            if kind == "softmax":
                return Softmax(name=name, rows=rows, cols=cols)
            if kind in NORMS:
                return Norm(name=name, kind=kind, rows=rows, cols=cols)
            return Reduce(name=name, fn=kind.removeprefix("reduce_"), rows=rows, cols=cols)
        (elements,) = _ints(option, dims, 1, f"{kind}:ELEMENTS")
        if kind in ACTIVATIONS:
            return Activation(name=name, fn=kind, elements=elements)
        if kind in BINARY:
            return Binary(name=name, fn=kind, elements=elements)
        return Move(name=name, kind=kind, elements=elements)
    except OpSpecError:
        raise
    except IRError as exc:
        raise OpSpecError(f"{option}: {exc}") from None
