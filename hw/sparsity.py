"""Sparse weight storage formats: what a matrix with zeros costs in memory (issue 27).

Each format stores a ``rows x cols`` matrix with ``nnz`` nonzeros of ``value_bits`` each, plus
its metadata. :func:`storage_bytes` gives the closed form; :func:`encode` builds the actual
arrays of a matrix in the format (numpy), and :func:`encoded_bytes` counts them, so tests hold
the closed forms to real encodings. Every array is rounded up to whole bytes.

* ``dense``: every value, ``rows x cols x value_bits``.
* ``bitmask``: the nonzero values plus one bit per element saying which are nonzero (the
  "bitmap" compression of sparse accelerators, e.g. NVDLA's weight compression: a mask plus the
  packed nonzero weights).
* ``csr`` / ``csc``: the nonzero values, one column (row) index per value, and ``rows + 1``
  (``cols + 1``) pointers. Indices take the smallest of 8, 16 or 32 bits that holds
  ``cols - 1`` (``rows - 1``); pointers the smallest of 16, 32 or 64 bits that holds ``nnz``
  (the widths cuSPARSE and scipy choose among).
* ``ellpack`` (blocked ELL, cuSPARSE's Blocked-ELL): the matrix cut into ``block x block``
  tiles; every block row stores the same number of tiles, the most nonzero tiles any block row
  has, each dense, with one column-block index per stored tile (32 bits, as cuSPARSE). Rows and
  columns are padded to a multiple of ``block``.
* ``nm`` (N:M structured, NVIDIA's 2:4): along each row, every group of M values keeps N, with
  ``ceil(log2 M)`` bits of position per kept value (2:4: 2 bits, the sparse tensor core's
  metadata). ``cols`` must be a multiple of M; the matrix must be N:M sparse to encode.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FORMATS", "storage_bytes", "encode", "encoded_bytes", "index_bits",
           "pointer_bits", "nm_index_bits", "nm_density", "compress_nm", "prune_n_m",
           "parse_nm", "array_nm", "detect_nm", "weight_bits", "whole_groups",
           "stored_weight_bytes", "ellpack_tiles_expected", "filter_read_bits",
           "channel_n", "nm_mix", "check_mix", "parse_nm_rows", "parse_sparsity", "scale_mix",
           "array_mix", "mix_label", "row_cuts", "row_tiles", "nm_or_dense"]

FORMATS = ("dense", "bitmask", "csr", "csc", "ellpack", "nm")


def _bytes(bits: float) -> int:
    return int(math.ceil(bits / 8))


def index_bits(extent: int) -> int:
    """Width of an index into ``extent`` positions: the smallest of 8, 16, 32 bits."""
    for w in (8, 16, 32):
        if extent - 1 < 1 << w:
            return w
    raise ValueError(f"index_bits: extent = {extent}: more than 2**32 positions")


def pointer_bits(nnz: int) -> int:
    """Width of a pointer into ``nnz`` values: the smallest of 16, 32, 64 bits holding nnz."""
    for w in (16, 32, 64):
        if nnz < 1 << w:
            return w
    raise ValueError(f"pointer_bits: nnz = {nnz}: too many")


def _check(fmt, rows, cols, nnz, value_bits):
    if fmt not in FORMATS:
        raise ValueError(f"sparse format = {fmt!r}: must be one of {', '.join(FORMATS)}")
    for key, v, lo in (("rows", rows, 1), ("cols", cols, 1), ("value_bits", value_bits, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"sparse storage: {key} = {v!r}: must be an integer >= {lo}")
    if isinstance(nnz, bool) or not isinstance(nnz, (int, np.integer)) or not \
            0 <= nnz <= rows * cols:
        raise ValueError(f"sparse storage: nnz = {nnz!r}: must be an integer in "
                         f"0..{rows * cols}")


def storage_bytes(fmt: str, rows: int, cols: int, nnz: int, value_bits: int = 8, *,
                  block: int = 4, tiles_per_block_row: int | None = None, n: int = 2,
                  m: int = 4) -> int:
    """Bytes of a ``rows x cols`` matrix with ``nnz`` nonzeros in ``fmt`` (module docstring).
    ``ellpack`` needs ``tiles_per_block_row`` (the most nonzero tiles in any block row; default:
    every tile); ``nm`` uses ``n`` and ``m`` (``nnz`` is then ``rows x cols x n / m``)."""
    _check(fmt, rows, cols, nnz, value_bits)
    if fmt == "dense":
        return _bytes(rows * cols * value_bits)
    if fmt == "bitmask":
        return _bytes(nnz * value_bits) + _bytes(rows * cols)
    if fmt in ("csr", "csc"):
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        return (_bytes(nnz * value_bits) + _bytes(nnz * index_bits(minor))
                + _bytes((major + 1) * pointer_bits(nnz)))
    if fmt == "ellpack":
        brows, bcols = -(-rows // block), -(-cols // block)
        t = bcols if tiles_per_block_row is None else tiles_per_block_row
        if not 0 <= t <= bcols:
            raise ValueError(f"ellpack: tiles_per_block_row = {t}: must be in 0..{bcols}")
        return _bytes(brows * t * block * block * value_bits) + _bytes(brows * t * 32)
    if not (1 <= n <= m) or cols % m:
        raise ValueError(f"nm: {n}:{m} with cols = {cols}: need 1 <= n <= m and cols a "
                         f"multiple of m")
    kept = rows * cols // m * n
    return _bytes(kept * value_bits) + _bytes(kept * nm_index_bits(m))


def nm_index_bits(m: int) -> int:
    """Bits of one N:M position index: ``ceil(log2 M)``, at least 1 (2:4: 2 bits)."""
    return max(1, math.ceil(math.log2(m)))


def _groups(w, m: int, axis: int, what: str):
    """``(w with axis last, its groups of m: shape (..., K / m, m))``; K must divide by m."""
    moved = np.moveaxis(np.asarray(w), axis, -1)
    k = moved.shape[-1]
    if k % m:
        raise ValueError(f"{what}: the axis has {k} elements: must be a multiple of M = {m}")
    return moved, moved.reshape(moved.shape[:-1] + (k // m, m))


def prune_n_m(w, n: int = 2, m: int = 4, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(pruned w, keep mask)``: N:M magnitude pruning along ``axis``: in every group of
    ``m`` the ``n`` largest magnitudes are kept (ties: the earlier element), the rest zeroed."""
    w = np.asarray(w)
    if not (isinstance(n, int) and isinstance(m, int) and 1 <= n <= m <= 64):
        raise ValueError(f"prune_n_m: n = {n!r}, m = {m!r}: need integers 1 <= n <= m <= 64")
    moved, groups = _groups(w, m, axis, "prune_n_m")
    # the n largest magnitudes of each group (a stable sort: ties keep the earlier element)
    order = np.argsort(-np.abs(groups), axis=-1, kind="stable")
    keep = np.zeros(groups.shape, bool)
    np.put_along_axis(keep, order[..., :n], True, axis=-1)
    mask = np.moveaxis(keep.reshape(moved.shape), -1, axis)
    return np.where(mask, w, 0), mask


def nm_density(w, m: int, axis: int = -1) -> int:
    """The smallest N for which ``w`` is N:M sparse along ``axis`` (the most nonzeros any
    group of ``m`` holds; 0 for an all-zero ``w``). The axis length must be a multiple of m."""
    _, groups = _groups(w, m, axis, "N:M")
    return int((groups != 0).sum(axis=-1).max(initial=0))


def parse_nm(text, where: str = "sparsity") -> tuple[int, int] | None:
    """``"N:M"`` (e.g. ``"2:4"``) as ``(N, M)``; ``None``, ``""`` or ``"dense"`` as None. A
    one-line ``ValueError`` otherwise (1 <= N <= M <= 64)."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "dense", "none")):
        return None
    if isinstance(text, (tuple, list)) and len(text) == 2:
        parts = list(text)
    elif isinstance(text, str) and text.count(":") == 1:
        parts = text.split(":")
    else:
        parts = None
    try:
        n, m = (int(str(v).strip()) for v in parts)
    except (TypeError, ValueError):
        raise ValueError(f"{where} = {text!r}: must be 'N:M' (e.g. '2:4') or 'dense'") from None
    if not 1 <= n <= m <= 64:
        raise ValueError(f"{where} = {text!r}: need 1 <= N <= M <= 64")
    return n, m


def array_nm(nm: tuple[int, int] | None, sparse_m: int) -> tuple[int, int] | None:
    """The N':M' that weights N:M sparse along K run as on PEs with groups of ``sparse_m``
    (``None``: dense). With s = ``sparse_m``, an N:M matrix is (N*s/M):s sparse when M divides s
    (1:2 runs as 2:4), and min(N, s):s when s divides M (any s consecutive of a group of M hold
    at most min(N, s) nonzeros: 2:8 runs as 2:4, 4:8 as 4:4, i.e. dense). It runs dense on
    dense PEs (``sparse_m = 0``), when neither divides the other, or when that is s:s."""
    if nm is None or not sparse_m:
        return None
    n, m = nm
    if sparse_m % m == 0:
        n2 = n * sparse_m // m
    elif m % sparse_m == 0:
        n2 = min(n, sparse_m)
    else:
        return None
    return None if n2 >= sparse_m else (n2, sparse_m)


def detect_nm(w, axis: int = -1, groups=(2, 4, 8, 16)) -> tuple[int, int] | None:
    """The N:M structure ``w``'s zeros have along ``axis``: over the group sizes M in
    ``groups`` that divide the axis, the one with the smallest N / M (:func:`nm_density`; ties:
    the smaller M); None when no group size leaves any position out (dense)."""
    w = np.asarray(w)
    k = w.shape[axis]
    best = None
    for m in groups:
        if k % m:
            continue
        n = max(1, nm_density(w, m, axis))
        if n < m and (best is None or n * best[1] < best[0] * m):
            best = (n, m)
    return best


def channel_n(w, m: int, axis: int = -1, channel_axis: int = 0) -> np.ndarray:
    """Each output channel's own N (row-wise N:M): for every index along ``channel_axis``, the
    most nonzeros any of its groups of ``m`` along ``axis`` holds (at least 1). ``w`` is 2-D
    (a GEMM's weights, K along ``axis``)."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"channel_n: weights of shape {w.shape}: must be 2-D")
    if (axis % 2) == (channel_axis % 2):
        raise ValueError(f"channel_n: axis = {axis} and channel_axis = {channel_axis} must differ")
    rows = np.moveaxis(w, channel_axis % 2, 0)
    _, groups = _groups(rows, m, -1, "N:M")
    return np.maximum(1, (groups != 0).sum(axis=-1).max(axis=-1, initial=0))


def nm_mix(ns) -> tuple[tuple[int, int], ...]:
    """Row-wise N:M as a mix: ``((N, channels), ...)``, largest N first, from every channel's
    N (:func:`channel_n`). A compiler sorts output channels by N, so only how many channels
    have each N matters."""
    values, counts = np.unique(np.asarray(ns, dtype=np.int64).ravel(), return_counts=True)
    return tuple((int(v), int(c)) for v, c in zip(values[::-1], counts[::-1]))


def check_mix(mix, m: int, where: str = "weight_nm_rows") -> tuple[tuple[int, int], ...]:
    """``mix`` (pairs ``(N, channels)``, or a mapping N -> channels) validated against group
    size ``m`` and normalised: 1 <= N <= m, channels >= 1, each N once, largest N first.
    A one-line ``ValueError`` otherwise."""
    try:
        raw = list(mix.items()) if isinstance(mix, dict) else [tuple(p) for p in mix]
        ok = bool(raw) and all(len(p) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in p) for p in raw)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"{where} = {mix!r}: must be (N, channels) pairs of integers, "
                         f"e.g. ((2, 96), (1, 32))")
    pairs = [(int(n), int(c)) for n, c in raw]
    seen = set()
    for n, c in pairs:
        if not 1 <= n <= m or c < 1 or n in seen:
            raise ValueError(f"{where} = {mix!r}: each N in 1..{m} (the group size M) once, "
                             f"with 1 or more channels; ({n}, {c}) is not")
        seen.add(n)
    return tuple(sorted(pairs, reverse=True))


def parse_nm_rows(text, where: str = "sparsity") -> tuple[tuple[tuple[int, int], ...], int] | None:
    """``"LO-HI:M"`` (e.g. ``"1-2:4"``): row-wise N:M where output channels take every N from
    LO to HI in equal shares (SCALE-Sim v3 draws each channel's N uniformly from 1..M/2; this is
    the mix such a draw has on average, without the noise), as ``(mix, M)`` with each N's share
    1 (:func:`scale_mix` sizes it to a layer). None when ``text`` is not of that form; a
    one-line ``ValueError`` when it is but the numbers are out of range."""
    if not isinstance(text, str) or text.count(":") != 1 or "-" not in text.split(":")[0]:
        return None
    left, right = text.split(":")
    try:
        lo, hi = (int(v.strip()) for v in left.split("-"))
        m = int(right.strip())
    except ValueError:
        raise ValueError(f"{where} = {text!r}: row-wise N:M must be 'LO-HI:M' (e.g. '1-2:4')") \
            from None
    if not 1 <= lo < hi <= m <= 64:
        raise ValueError(f"{where} = {text!r}: need 1 <= LO < HI <= M <= 64")
    return tuple((n, 1) for n in range(hi, lo - 1, -1)), m


def parse_sparsity(text, where: str = "sparsity"):
    """``(nm, mix)`` of a ``--sparsity`` value: ``"N:M"`` (layer-wise: ``((N, M), None)``),
    ``"LO-HI:M"`` (row-wise, :func:`parse_nm_rows`: ``((HI, M), mix)``) or ``"dense"``
    (``(None, None)``). A one-line ``ValueError`` otherwise."""
    rows = parse_nm_rows(text, where)
    if rows is not None:
        mix, m = rows
        return (mix[0][0], m), mix
    try:
        return parse_nm(text, where), None
    except ValueError as exc:
        if "must be 'N:M'" not in str(exc):
            raise
        raise ValueError(f"{where} = {text!r}: must be 'N:M' (e.g. '2:4'), row-wise 'LO-HI:M' "
                         f"(e.g. '1-2:4': each output channel its own N) or 'dense'") from None


def scale_mix(mix, channels: int) -> tuple[tuple[int, int], ...]:
    """``mix`` (``(N, weight)`` pairs, largest N first) dealt over ``channels`` output
    channels: channel counts in proportion to the weights, by cumulative rounding (so they sum
    to ``channels``), N values left with none dropped. A core's or a rank's share of a layer
    gets the layer's mix this way (channels dealt round-robin after sorting)."""
    total = sum(c for _, c in mix)
    out, done, cum = [], 0, 0
    for n, c in mix:
        cum += c
        upto = (2 * cum * channels + total) // (2 * total)     # round(cum / total * channels)
        if upto > done:
            out.append((n, upto - done))
            done = upto
    return tuple(out)


def array_mix(mix, m: int, sparse_m: int) -> tuple[tuple[int, int], ...]:
    """``mix`` (``(N, channels)`` of N:``m``) as it runs on PEs with groups of ``sparse_m``
    (:func:`array_nm` for each N; a channel that cannot skip anything runs with N =
    ``sparse_m``: dense), merged and largest N first."""
    out: dict[int, int] = {}
    for n, c in mix:
        runs = array_nm((n, m), sparse_m)
        key = sparse_m if runs is None else runs[0]
        out[key] = out.get(key, 0) + c
    return tuple(sorted(out.items(), reverse=True))


def nm_or_dense(n: int, m: int) -> tuple[int, int] | None:
    """The N:M a run of row-wise N:M channels with N of ``m`` runs with: ``(n, m)``, or None
    (dense) when ``n`` keeps every weight."""
    return None if n >= m else (n, m)


def row_cuts(mix, n0: int, size: int, fold: int) -> list[tuple[int, int]]:
    """Row-wise N:M as a compiler cuts it: the output channels ``[n0, n0 + size)``, sorted by
    N largest first (``mix``: ``(N, channels)`` pairs in that order), as ``(first, end)`` runs,
    one per N they hold: cut where N changes, rounded up to whole ``fold``-wide column folds
    from ``n0`` (a fold runs at the largest N of its channels; ``fold`` 1: exact cuts, for a
    dataflow that streams the channels in time)."""
    end, cuts, first = n0 + size, [n0], 0
    for _, channels in mix:
        first += channels
        cut = n0 + -(-(first - n0) // fold) * fold
        if cuts[-1] < cut < end:
            cuts.append(cut)
    cuts.append(end)
    return list(zip(cuts, cuts[1:]))


def row_tiles(ns, m: int, fold: int) -> tuple[np.ndarray, list[tuple]]:
    """Row-wise N:M of one tile of every output channel, as the compiler runs it:
    ``(order, tiles)``. ``order`` sorts the channels by their own N (``ns``,
    :func:`channel_n`), largest first (stable); ``tiles`` are :func:`row_cuts`'s runs of the
    sorted channels, each ``(first, size, nm)`` at the N of its first channel, the largest it
    holds (``nm`` None: that N is ``m``, dense)."""
    ns = np.asarray(ns, dtype=np.int64).ravel()
    order = np.argsort(-ns, kind="stable")
    tiles = []
    for first, end in row_cuts(nm_mix(ns), 0, ns.size, fold):
        tiles.append((first, end - first, nm_or_dense(int(ns[order[first]]), m)))
    return order, tiles


def mix_label(mix, m: int) -> str:
    """``mix`` in a report: ``"1-2:4"`` for its range of N (its counts are in the record)."""
    lo, hi = min(n for n, _ in mix), max(n for n, _ in mix)
    return f"{hi}:{m}" if lo == hi else f"{lo}-{hi}:{m}"


def weight_bits(value_bits: int, nm: tuple[int, int] | None) -> int:
    """Bits of one stored weight: its value, plus its ``ceil(log2 M)``-bit index when it is
    N:M compressed (``nm``; None: dense)."""
    return value_bits + (0 if nm is None else nm_index_bits(nm[1]))


def whole_groups(k: int, nm: tuple[int, int] | None) -> int:
    """``k`` rounded up to whole N:M groups of M (a K tile that ends inside a group runs the
    whole group; None: ``k``)."""
    return k if nm is None else -(-k // nm[1]) * nm[1]


def ellpack_tiles_expected(cols: int, density: float, block: int = 4) -> int:
    """Stored tiles per block row of a ``rows x cols`` matrix in blocked ELLPACK when its
    nonzeros, ``density`` of the elements, are spread uniformly at random: the expected number
    of the ``ceil(cols / block)`` tiles that hold one, ``1 - (1 - density)^(block^2)`` of
    them, rounded up. ELLPACK stores the most any block row has; this is the mean, so it is a
    lower bound for real weights (count them with :func:`encode` when you have them)."""
    tiles = -(-cols // block)
    return min(tiles, math.ceil(tiles * (1.0 - (1.0 - density) ** (block * block)) - 1e-9))


def stored_weight_bytes(fmt: str, k: int, n: int, density: float, value_bits: int,
                        count: int = 1) -> int:
    """Bytes of ``count`` K x N GEMM weight matrices with ``density`` of their elements
    nonzero, stored in ``fmt`` (:data:`FORMATS` but ``nm``) as ``n x k`` matrices (output
    channels by reduction: PyTorch's and ONNX's ``[out, in]`` weight layout), each with
    ``round(density x k x n)`` nonzeros (:func:`storage_bytes`; ELLPACK by
    :func:`ellpack_tiles_expected`)."""
    if fmt == "nm" or fmt not in FORMATS:
        raise ValueError(f"weight format = {fmt!r}: must be one of "
                         f"{', '.join(f for f in FORMATS if f != 'nm')}")
    nnz = round(density * k * n)
    tiles = ellpack_tiles_expected(k, density) if fmt == "ellpack" else None
    return count * storage_bytes(fmt, n, k, nnz, value_bits, tiles_per_block_row=tiles)


def filter_read_bits(value_bits: int, nm: tuple[int, int] | None,
                     store: tuple[str, int, int] | None) -> tuple[int, int]:
    """``(num, den)``: ``reads`` weight reads through a filter port carry
    ``ceil(reads * num / den)`` bits. Dense: the value; N:M compressed: the value and its
    index (:func:`weight_bits`); kept in a sparse format (``store``: ``(format, bytes,
    elements)`` of the whole tensor): its stored bits per element, on average."""
    if store is None:
        return weight_bits(value_bits, nm), 1
    _, stored, elements = store
    g = math.gcd(8 * stored, elements) or 1
    return 8 * stored // g, elements // g


def compress_nm(w, n: int, m: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """``(values, index)``: ``w`` N:M-compressed along ``axis``, which shrinks from K to
    ``K * n / m``. Each group of ``m`` keeps ``n`` slots: its nonzeros in position order, then
    (if it has fewer than ``n``) its first zero positions, as zeros. ``index`` (uint8) holds
    each kept value's position in its group (0..m-1), the sparse tensor core's metadata.
    ``K`` must be a multiple of ``m`` and no group may hold more than ``n`` nonzeros."""
    w = np.asarray(w)
    if not (isinstance(n, (int, np.integer)) and isinstance(m, (int, np.integer))
            and 1 <= n <= m <= 64):
        raise ValueError(f"N:M = {n!r}:{m!r}: need integers 1 <= N <= M <= 64")
    moved, groups = _groups(w, m, axis, f"N:M {n}:{m}")
    k = moved.shape[-1]
    nz = groups != 0
    counts = nz.sum(axis=-1)
    if (counts > n).any():
        where = np.unravel_index(int(np.argmax(counts > n)), counts.shape)
        g = int(where[-1])
        raise ValueError(f"N:M {n}:{m}: the group of elements {g * m}..{g * m + m - 1} along "
                         f"the compressed axis (other indices {tuple(int(i) for i in where[:-1])}) has "
                         f"{int(counts[where])} nonzeros: at most {n} allowed (prune first: "
                         f"prune_n_m)")
    order = np.argsort(~nz, axis=-1, kind="stable")[..., :n]
    values = np.take_along_axis(groups, order, axis=-1)
    shape = moved.shape[:-1] + (k // m * n,)
    return (np.moveaxis(values.reshape(shape), -1, axis),
            np.moveaxis(order.astype(np.uint8).reshape(shape), -1, axis))


def _pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ``values`` (< 2**bits each) packed little-endian into bytes."""
    v = np.asarray(values, dtype=np.uint64).ravel()
    shifts = np.arange(bits, dtype=np.uint64)
    bitstream = ((v[:, None] >> shifts) & np.uint64(1)).astype(np.uint8).ravel()
    return np.packbits(bitstream, bitorder="little")


def encode(w, fmt: str, value_bits: int = 8, *, block: int = 4, n: int = 2,
           m: int = 4) -> dict:
    """The arrays of ``w`` (2-D) in ``fmt``: ``{name: uint8 array of its bytes}``. Values are
    stored as their ``value_bits``-bit codes (the low bits of each element's integer code;
    floats: the low bits of their IEEE bit pattern), so the byte counts are the format's."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"encode: w has shape {w.shape}: must be 2-D")
    rows, cols = w.shape
    codes = (w.view(f"u{w.dtype.itemsize}").astype(np.uint64) if w.dtype.kind == "f"
             else w.astype(np.int64).view(np.uint64))
    codes = codes & np.uint64((1 << value_bits) - 1) if value_bits < 64 else codes
    nz = w != 0
    if fmt == "dense":
        return {"values": _pack_bits(codes, value_bits)}
    if fmt == "bitmask":
        return {"values": _pack_bits(codes[nz], value_bits),
                "mask": np.packbits(nz.ravel(), bitorder="little")}
    if fmt in ("csr", "csc"):
        major = w if fmt == "csr" else w.T
        mcodes = codes if fmt == "csr" else codes.T
        mnz = major != 0
        idx = np.nonzero(mnz)[1]
        ptr = np.concatenate([[0], np.cumsum(mnz.sum(axis=1))])
        nnz = int(mnz.sum())
        return {"values": _pack_bits(mcodes[mnz], value_bits),
                "indices": _pack_bits(idx, index_bits(major.shape[1])),
                "pointers": _pack_bits(ptr, pointer_bits(nnz))}
    if fmt == "ellpack":
        brows, bcols = -(-rows // block), -(-cols // block)
        pad = np.zeros((brows * block, bcols * block), w.dtype)
        pad[:rows, :cols] = w
        tiles = pad.reshape(brows, block, bcols, block).transpose(0, 2, 1, 3)
        live = (tiles != 0).any(axis=(2, 3))
        t = int(live.sum(axis=1).max()) if live.size else 0
        vals, cols_idx = [], []
        pcodes = np.zeros(pad.shape, np.uint64)
        pcodes[:rows, :cols] = codes
        ctiles = pcodes.reshape(brows, block, bcols, block).transpose(0, 2, 1, 3)
        for br in range(brows):
            which = list(np.flatnonzero(live[br])) + [0] * (t - int(live[br].sum()))
            for j, bc in enumerate(which):
                vals.append(ctiles[br, bc].ravel() if j < live[br].sum()
                            else np.zeros(block * block, np.uint64))
                cols_idx.append(bc)
        values = np.concatenate(vals) if vals else np.zeros(0, np.uint64)
        return {"values": _pack_bits(values, value_bits),
                "block_columns": _pack_bits(np.asarray(cols_idx, np.uint64), 32),
                "tiles_per_block_row": np.array([t])}
    if fmt == "nm":
        if cols % m:
            raise ValueError(f"encode nm: cols = {cols}: must be a multiple of m = {m}")
        try:
            _, order = compress_nm(w, n, m, axis=1)
        except ValueError as exc:
            raise ValueError(f"encode nm: the matrix is not {n}:{m} sparse ({exc})") from None
        slot = (np.arange(order.shape[1]) // n * m)[None, :] + order
        kept = np.take_along_axis(codes, slot.astype(np.int64), axis=1)
        return {"values": _pack_bits(kept, value_bits),
                "metadata": _pack_bits(order.astype(np.uint64), nm_index_bits(m))}
    raise ValueError(f"sparse format = {fmt!r}: must be one of {', '.join(FORMATS)}")


def encoded_bytes(arrays: dict) -> int:
    """Bytes of an :func:`encode` result (its byte arrays; ``tiles_per_block_row`` is a
    header, not counted)."""
    return int(sum(a.nbytes for k, a in arrays.items() if k != "tiles_per_block_row"))
