"""NVDLA SDP (single data point processor) on whole tensors, in hardware order, bit for bit.

The SDP takes the 32-bit values CACC delivers (or a feature cube read from memory) and runs
them through, in this order (``doc/hw/v1/ias/unit_description.rst``, C model
``cmod/hls/sdp/sdp_c.cpp``):

1. **X1** (``BS``, bias) and 2. **X2** (``BN``, batch-norm): ALU, MUL, ReLU per unit
   (:func:`hw.nvdla.numerics.sdp_x`, C model ``cmod/hls/sdp/sdp_x.cpp``);
3. **Y** (``EW``, element-wise): operand converters, MUL, ALU (:func:`~hw.nvdla.numerics.sdp_y`,
   :func:`~hw.nvdla.numerics.cvt_operand`; ``cmod/hls/sdp/sdp_y.cpp``, ``sdp_y_core.cpp``,
   ``sdp_y_cvt.cpp``), with Y's lookup table through :func:`hw.nvdla.lut.sdp_y_lut`;
4. the **output converter** (:func:`~hw.nvdla.numerics.cvt_out`) to int8 or int16.

Parameters are the register fields of ``NVDLA_SDP`` (``D_DP_BS_*``, ``D_DP_BN_*``,
``D_DP_EW_*``, ``D_CVT_*``, ``D_DATA_FORMAT``) and of ``NVDLA_SDP_RDMA`` (``D_BRDMA_CFG``,
``D_NRDMA_CFG``, ``D_ERDMA_CFG``: ``DATA_MODE``, ``DATA_SIZE``), as listed in
``shared/nvdla/rdl/NVDLA_SDP.rdl``. Field names are the register field names, lower case,
without the unit prefix (``BS_ALU_SHIFT_VALUE`` is ``SdpXParams.alu_shift_value``); enumerated
fields take the register's enum names (``"SUM"``, ``"MEM"``, ``"PER_KERNEL"``).

Operand sources, exactly as the registers allow:

* ``*_SRC = REG``: one register operand for every element. X: int16 (``BS_ALU_OPERAND``);
  Y: int32 (``EW_ALU_OPERAND``), used directly, without the converter (``sdp_y_core.cpp``).
* ``*_SRC = MEM``: operands read by the unit's RDMA, ``PER_KERNEL`` (one per output channel) or
  ``PER_ELEMENT`` (one per feature element), ``ONE_BYTE`` (int8) or ``TWO_BYTE`` (int16). X's
  memory operands are constants of the layer and live in :class:`SdpXParams` (``alu_data``,
  ``mul_data``); Y's are a run-time tensor passed to :func:`sdp_apply` (``ew_operand``) and go
  through Y's operand converter unless ``*_CVT_BYPASS``.

Everything runs in one Numba kernel (:func:`_sdp_kernel`) that calls the scalar units of
:mod:`hw.nvdla.numerics`; all checks happen in Python before it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hw._jitcache import njit

from hw.nvdla.numerics import (
    ALU_EQL, ALU_MAX, ALU_MIN, ALU_SUM, cvt_operand, cvt_out, cvt_out_array, sdp_x, sdp_y,
)
from hw.systolic.config import ConfigError

__all__ = ["SdpXParams", "SdpYParams", "SdpCvtParams", "SdpParams", "sdp_apply"]

_ALGOS = {"MAX": ALU_MAX, "MIN": ALU_MIN, "SUM": ALU_SUM, "EQL": ALU_EQL}
_SRCS = ("REG", "MEM")
_MODES = ("PER_KERNEL", "PER_ELEMENT")
_SIZES = {"ONE_BYTE": 8, "TWO_BYTE": 16}
_PRECISIONS = {"INT8": 8, "INT16": 16}
# Operand index modes of the kernel: register (one value), per kernel (channel), per element.
_REG, _KERNEL, _ELEMENT = 0, 1, 2


def _int(owner: str, name: str, value, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ConfigError(f"{owner}.{name} = {value!r}: must be an integer in {lo}..{hi} ({what})")
    return int(value)


def _bool(owner: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{owner}.{name} = {value!r}: must be True or False")
    return bool(value)


def _choice(owner: str, name: str, value, allowed) -> str:
    if value not in allowed:
        raise ConfigError(f"{owner}.{name} = {value!r}: must be one of {', '.join(allowed)}")
    return value


def _set(obj, name, value):
    object.__setattr__(obj, name, value)


@dataclass(frozen=True, eq=False)
class SdpXParams:
    """SDP X1 (``D_DP_BS_*``, ``D_BRDMA_CFG``) or X2 (``D_DP_BN_*``, ``D_NRDMA_CFG``).

    Attributes (register field in brackets, ``BS`` shown; ``BN`` is the same for X2)
    ----------
    bypass: skip the whole unit [BS_BYPASS]. Default True.
    alu_bypass, alu_algo ("MAX", "MIN", "SUM"), alu_src ("REG"/"MEM"), alu_shift_value (0..63,
        left shift of the operand, saturated to 32 bits), alu_operand (int16 register value)
        [BS_ALU_BYPASS, BS_ALU_ALGO, BS_ALU_SRC, BS_ALU_SHIFT_VALUE, BS_ALU_OPERAND].
    mul_bypass, mul_src, mul_shift_value (0..255, the truncate after the multiplier; applied
        even with the multiplier bypassed), mul_operand (int16), mul_prelu
        [BS_MUL_BYPASS, BS_MUL_SRC, BS_MUL_SHIFT_VALUE, BS_MUL_OPERAND, BS_MUL_PRELU].
    relu_bypass [BS_RELU_BYPASS]. Default True.
    data_mode ("PER_KERNEL"/"PER_ELEMENT"), data_size ("ONE_BYTE"/"TWO_BYTE") of the memory
        operands [BRDMA_DATA_MODE, BRDMA_DATA_SIZE].
    alu_data, mul_data: the memory operands when ``*_src == "MEM"`` (what the RDMA reads):
        shape (K,) per kernel, (H, W, K) or (N, H, W, K) per element; int8 or int16 values by
        ``data_size``. Stored as read-only int64 arrays. Equality is identity (``eq=False``).
    """

    bypass: bool = True
    alu_bypass: bool = True
    alu_algo: str = "SUM"
    alu_src: str = "REG"
    alu_shift_value: int = 0
    alu_operand: int = 0
    mul_bypass: bool = True
    mul_src: str = "REG"
    mul_shift_value: int = 0
    mul_operand: int = 0
    mul_prelu: bool = False
    relu_bypass: bool = True
    data_mode: str = "PER_KERNEL"
    data_size: str = "TWO_BYTE"
    alu_data: np.ndarray | None = field(default=None, repr=False)
    mul_data: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        o = "SdpXParams"
        for name in ("bypass", "alu_bypass", "mul_bypass", "mul_prelu", "relu_bypass"):
            _set(self, name, _bool(o, name, getattr(self, name)))
        _choice(o, "alu_algo", self.alu_algo, ("MAX", "MIN", "SUM"))
        _choice(o, "alu_src", self.alu_src, _SRCS)
        _choice(o, "mul_src", self.mul_src, _SRCS)
        _choice(o, "data_mode", self.data_mode, _MODES)
        _choice(o, "data_size", self.data_size, tuple(_SIZES))
        for name, lo, hi, what in (("alu_shift_value", 0, 63, "6-bit left shift"),
                                   ("mul_shift_value", 0, 255, "8-bit truncate"),
                                   ("alu_operand", -32768, 32767, "int16 register operand"),
                                   ("mul_operand", -32768, 32767, "int16 register operand")):
            _set(self, name, _int(o, name, getattr(self, name), lo, hi, what))
        for op in ("alu", "mul"):
            name = f"{op}_data"
            used = getattr(self, f"{op}_src") == "MEM" and not getattr(self, f"{op}_bypass")
            _set(self, name, _mem_data(o, name, getattr(self, name), used and not self.bypass,
                                       self.data_mode, _SIZES[self.data_size],
                                       f"{op}_src = 'MEM'"))

    def _operand(self, op: str, shape) -> tuple[int, np.ndarray]:
        """(index mode, flat int64 operand array) for the kernel."""
        if getattr(self, f"{op}_src") == "REG" or self.bypass or getattr(self, f"{op}_bypass"):
            return _REG, np.array([getattr(self, f"{op}_operand")], np.int64)
        return _flat_operand(f"SdpXParams.{op}_data", getattr(self, f"{op}_data"),
                             self.data_mode, shape)


@dataclass(frozen=True)
class SdpYParams:
    """SDP Y, the element-wise unit (``D_DP_EW_*``, ``D_ERDMA_CFG``).

    Attributes (register field in brackets)
    ----------
    bypass [EW_BYPASS]. Default True.
    alu_bypass, alu_algo ("MAX", "MIN", "SUM", "EQL"), alu_src, alu_operand (int32 register
        value), alu_cvt_bypass, alu_cvt_offset (int32), alu_cvt_scale (int16),
        alu_cvt_truncate (0..63) [EW_ALU_*; the converter applies to memory operands only].
    mul_bypass, mul_src, mul_operand (int32), mul_cvt_bypass, mul_cvt_offset, mul_cvt_scale,
        mul_cvt_truncate, mul_prelu [EW_MUL_*].
    truncate: right shift after the multiplier, 0..1023 (a 10-bit field; 64 or more gives 0)
        [EW_TRUNCATE].
    lut_bypass [EW_LUT_BYPASS]; lut: the tables and ``S_LUT_*`` registers
        (:class:`hw.nvdla.lut.LutParams`), required when the LUT is on. The LUT maps Y's
        ALU result before the output converter (C model ``sdp_y.cpp``; :func:`hw.nvdla.lut.sdp_y_lut`).
    data_mode, data_size: of the element-wise operand tensor [ERDMA_DATA_MODE, _DATA_SIZE].
    """

    bypass: bool = True
    alu_bypass: bool = True
    alu_algo: str = "SUM"
    alu_src: str = "REG"
    alu_operand: int = 0
    alu_cvt_bypass: bool = True
    alu_cvt_offset: int = 0
    alu_cvt_scale: int = 1
    alu_cvt_truncate: int = 0
    mul_bypass: bool = True
    mul_src: str = "REG"
    mul_operand: int = 1
    mul_cvt_bypass: bool = True
    mul_cvt_offset: int = 0
    mul_cvt_scale: int = 1
    mul_cvt_truncate: int = 0
    mul_prelu: bool = False
    truncate: int = 0
    lut_bypass: bool = True
    data_mode: str = "PER_ELEMENT"
    data_size: str = "TWO_BYTE"
    lut: object = field(default=None, repr=False)

    def __post_init__(self):
        o = "SdpYParams"
        for name in ("bypass", "alu_bypass", "alu_cvt_bypass", "mul_bypass", "mul_cvt_bypass",
                     "mul_prelu", "lut_bypass"):
            _set(self, name, _bool(o, name, getattr(self, name)))
        _choice(o, "alu_algo", self.alu_algo, tuple(_ALGOS))
        _choice(o, "alu_src", self.alu_src, _SRCS)
        _choice(o, "mul_src", self.mul_src, _SRCS)
        _choice(o, "data_mode", self.data_mode, _MODES)
        _choice(o, "data_size", self.data_size, tuple(_SIZES))
        for op in ("alu", "mul"):
            for name, lo, hi, what in ((f"{op}_operand", -2**31, 2**31 - 1, "int32 operand"),
                                       (f"{op}_cvt_offset", -2**31, 2**31 - 1, "int32"),
                                       (f"{op}_cvt_scale", -32768, 32767, "int16"),
                                       (f"{op}_cvt_truncate", 0, 63, "U6")):
                _set(self, name, _int(o, name, getattr(self, name), lo, hi, what))
        _set(self, "truncate", _int(o, "truncate", self.truncate, 0, 1023, "10-bit EW_TRUNCATE"))
        if not self.bypass and not self.lut_bypass:
            from hw.nvdla.lut import LutParams
            if not isinstance(self.lut, LutParams):
                raise ConfigError(f"SdpYParams.lut = {self.lut!r}: lut_bypass = False needs the "
                                  f"table and its registers as a hw.nvdla.lut.LutParams")

    def _mem_ops(self) -> tuple[str, ...]:
        """Which of "alu", "mul" read the element-wise operand tensor."""
        if self.bypass:
            return ()
        return tuple(op for op in ("alu", "mul")
                     if getattr(self, f"{op}_src") == "MEM" and not getattr(self, f"{op}_bypass"))


@dataclass(frozen=True)
class SdpCvtParams:
    """Output converter (``D_CVT_OFFSET``, ``D_CVT_SCALE``, ``D_CVT_SHIFT``):
    ``out = sat_out(sat17(shift_right((x - cvt_offset) * cvt_scale, cvt_shift)))``.
    Defaults are the identity (offset 0, scale 1, shift 0)."""

    cvt_offset: int = 0
    cvt_scale: int = 1
    cvt_shift: int = 0

    def __post_init__(self):
        o = "SdpCvtParams"
        for name, lo, hi, what in (("cvt_offset", -2**31, 2**31 - 1, "int32"),
                                   ("cvt_scale", -32768, 32767, "int16"),
                                   ("cvt_shift", 0, 63, "U6")):
            _set(self, name, _int(o, name, getattr(self, name), lo, hi, what))


@dataclass(frozen=True, eq=False)
class SdpParams:
    """The whole SDP: X1 (``bs``), X2 (``bn``), Y (``ew``), output converter (``cvt``) and
    ``D_DATA_FORMAT`` (``proc_precision``, ``out_precision``: "INT8" or "INT16"; FP16 is not
    modelled here). The default is every unit bypassed: int32 in, saturated int8 out."""

    bs: SdpXParams = field(default_factory=SdpXParams)
    bn: SdpXParams = field(default_factory=SdpXParams)
    ew: SdpYParams = field(default_factory=SdpYParams)
    cvt: SdpCvtParams = field(default_factory=SdpCvtParams)
    proc_precision: str = "INT8"
    out_precision: str = "INT8"

    def __post_init__(self):
        for name, cls in (("bs", SdpXParams), ("bn", SdpXParams), ("ew", SdpYParams),
                          ("cvt", SdpCvtParams)):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"SdpParams.{name} = {getattr(self, name)!r}: must be a "
                                  f"{cls.__name__}")
        for name in ("proc_precision", "out_precision"):
            value = getattr(self, name)
            if value == "FP16":
                raise ConfigError(f"SdpParams.{name} = 'FP16': the fp16 SDP is not modelled "
                                  f"here; use 'INT8' or 'INT16'")
            _choice("SdpParams", name, value, tuple(_PRECISIONS))


def _mem_data(owner, name, data, used, mode, bits, why):
    if data is None:
        if used:
            raise ConfigError(f"{owner}.{name} = None: {why} needs the memory operands "
                              f"({'shape (K,)' if mode == 'PER_KERNEL' else 'shape (H, W, K)'})")
        return None
    arr = np.asarray(data)
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"{owner}.{name}: dtype {arr.dtype}, shape {arr.shape}: must be a "
                          f"non-empty integer array")
    want = (1,) if mode == "PER_KERNEL" else (3, 4)
    if arr.ndim not in want:
        raise ConfigError(f"{owner}.{name}: shape {arr.shape}: {mode} operands must be "
                          f"{'(K,)' if mode == 'PER_KERNEL' else '(H, W, K) or (N, H, W, K)'}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if arr.min() < lo or arr.max() > hi:
        bad = arr.min() if arr.min() < lo else arr.max()
        raise ConfigError(f"{owner}.{name}: value {int(bad)} is outside {lo}..{hi} "
                          f"(data_size {'ONE_BYTE' if bits == 8 else 'TWO_BYTE'})")
    out = np.array(arr, np.int64)
    out.flags.writeable = False
    return out


def _flat_operand(name, data, mode, shape) -> tuple[int, np.ndarray]:
    n, h, w, k = shape
    if mode == "PER_KERNEL":
        if data.shape != (k,):
            raise ValueError(f"{name}: shape {data.shape}: PER_KERNEL needs one operand per "
                             f"output channel, shape ({k},)")
        return _KERNEL, np.ascontiguousarray(data, np.int64)
    if data.shape not in ((h, w, k), (n, h, w, k)):
        raise ValueError(f"{name}: shape {data.shape}: PER_ELEMENT needs the feature shape "
                         f"({h}, {w}, {k}) or ({n}, {h}, {w}, {k})")
    full = np.broadcast_to(data, shape)
    return _ELEMENT, np.ascontiguousarray(full, np.int64).ravel()


# ---------------------------------------------------------------------------------- kernel
@njit(cache=True)
def _pick(ops, mode, i, k_len):
    if mode == 0:
        return ops[0]
    if mode == 1:
        return ops[i % k_len]
    return ops[i]


@njit(cache=True)
def _sdp_kernel(d, k_len, xcfg, x1_alu, x1_mul, x2_alu, x2_mul, ycfg, y_alu, y_mul,
                cvt_offset, cvt_scale, cvt_shift, out_bits, cvt_on):
    """The SDP on a flat NHWC int64 array. ``xcfg`` rows (X1, X2): bypass, alu_bypass,
    alu_algo, alu_shift, mul_bypass, mul_shift, prelu, relu_bypass, alu_mode, mul_mode.
    ``ycfg``: bypass, alu_bypass, alu_algo, alu_mode, alu_cvt (0 none / 1 bypass / 2 convert),
    alu_cvt_offset, alu_cvt_scale, alu_cvt_truncate, mul_bypass, mul_mode, mul_cvt,
    mul_cvt_offset, mul_cvt_scale, mul_cvt_truncate, prelu, truncate."""
    out = np.empty(d.shape[0], np.int64)
    for i in range(d.shape[0]):
        v = d[i]
        for u in range(2):
            c = xcfg[u]
            alu_ops = x1_alu if u == 0 else x2_alu
            mul_ops = x1_mul if u == 0 else x2_mul
            v = sdp_x(v, c[0] != 0, c[1] != 0, c[2], _pick(alu_ops, c[8], i, k_len), c[3],
                      c[4] != 0, _pick(mul_ops, c[9], i, k_len), c[5], c[6] != 0, c[7] != 0)
        if ycfg[0] == 0:
            a_op = _pick(y_alu, ycfg[3], i, k_len)
            if ycfg[4] == 2:
                a_op = cvt_operand(a_op, ycfg[5], ycfg[6], ycfg[7])
            m_op = _pick(y_mul, ycfg[9], i, k_len)
            if ycfg[10] == 2:
                m_op = cvt_operand(m_op, ycfg[11], ycfg[12], ycfg[13])
            v = sdp_y(v, ycfg[8] != 0, m_op, ycfg[15], ycfg[14] != 0, ycfg[1] != 0, ycfg[2],
                      a_op)
        out[i] = cvt_out(v, cvt_offset, cvt_scale, cvt_shift, out_bits) if cvt_on else v
    return out


# ------------------------------------------------------------------------------ front end
def _x_cfg(p: SdpXParams, shape):
    alu_mode, alu_ops = p._operand("alu", shape)
    mul_mode, mul_ops = p._operand("mul", shape)
    row = [p.bypass, p.alu_bypass, _ALGOS[p.alu_algo], p.alu_shift_value, p.mul_bypass,
           p.mul_shift_value, p.mul_prelu, p.relu_bypass, alu_mode, mul_mode]
    return np.array(row, np.int64), alu_ops, mul_ops


def _y_operands(p: SdpYParams, ew_operand, shape):
    mem = p._mem_ops()
    if not mem:
        if ew_operand is not None:
            raise ValueError("ew_operand is given but SDP Y reads no memory operand "
                             "(ew.bypass, or no *_src = 'MEM' with its unit enabled)")
        data = {}
    elif len(mem) == 1:
        if ew_operand is None:
            raise ValueError(f"ew_operand = None: SDP Y's {mem[0]}_src = 'MEM' needs the "
                             f"element-wise operand tensor")
        data = {mem[0]: ew_operand}
    else:
        if not (isinstance(ew_operand, (tuple, list)) and len(ew_operand) == 2):
            raise ValueError("ew_operand: SDP Y's ALU and MUL both read memory "
                             "(ERDMA_DATA_USE = BOTH): pass a pair (alu_data, mul_data)")
        data = {"alu": ew_operand[0], "mul": ew_operand[1]}
    result = {}
    for op in ("alu", "mul"):
        if op in data:
            arr = _mem_data("ew_operand", op, data[op], True, p.data_mode,
                            _SIZES[p.data_size], "")
            mode, ops = _flat_operand(f"ew_operand ({op})", arr, p.data_mode, shape)
            cvt = 1 if getattr(p, f"{op}_cvt_bypass") else 2
        else:
            mode, ops, cvt = _REG, np.array([getattr(p, f"{op}_operand")], np.int64), 0
        result[op] = (mode, ops, cvt)
    return result


def sdp_apply(x_int32_nhwc, params: SdpParams, ew_operand=None) -> np.ndarray:
    """Run the SDP on a whole tensor: X1, X2, Y, output converter, element by element.

    ``x_int32_nhwc``: integer array (N, H, W, K) of 32-bit values (what CACC delivers, see
    :func:`hw.nvdla.conv.conv_to_sdp`). ``ew_operand``: Y's memory operand tensor when an
    ``ew`` ALU or MUL has ``*_src = "MEM"`` (shape (K,) per kernel, (H, W, K) or (N, H, W, K)
    per element; a pair ``(alu_data, mul_data)`` when both read memory). Returns int8 or int16
    (``params.out_precision``) of the same shape. Raises ValueError / ConfigError on bad input,
    before any Numba code runs.
    """
    if not isinstance(params, SdpParams):
        raise ValueError(f"params = {params!r}: must be an SdpParams")
    x = np.asarray(x_int32_nhwc)
    if x.ndim != 4 or x.size == 0:
        raise ValueError(f"x_int32_nhwc: shape {x.shape}: must be non-empty (N, H, W, K)")
    if not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"x_int32_nhwc: dtype {x.dtype}: must be an integer array")
    if x.min() < -2**31 or x.max() > 2**31 - 1:
        bad = x.min() if x.min() < -2**31 else x.max()
        raise ValueError(f"x_int32_nhwc: value {int(bad)} is outside the int32 range")
    shape = x.shape
    x1, x1_alu, x1_mul = _x_cfg(params.bs, shape)
    x2, x2_alu, x2_mul = _x_cfg(params.bn, shape)
    y = params.ew
    ops = _y_operands(y, ew_operand, shape)
    (a_mode, a_ops, a_cvt), (m_mode, m_ops, m_cvt) = ops["alu"], ops["mul"]
    ycfg = np.array([y.bypass, y.alu_bypass, _ALGOS[y.alu_algo], a_mode, a_cvt,
                     y.alu_cvt_offset, y.alu_cvt_scale, y.alu_cvt_truncate, y.mul_bypass,
                     m_mode, m_cvt, y.mul_cvt_offset, y.mul_cvt_scale, y.mul_cvt_truncate,
                     y.mul_prelu, y.truncate], np.int64)
    out_bits = _PRECISIONS[params.out_precision]
    lut_on = not y.bypass and not y.lut_bypass
    flat = _sdp_kernel(np.ascontiguousarray(x, np.int64).ravel(), shape[3],
                       np.stack([x1, x2]), x1_alu, x1_mul, x2_alu, x2_mul, ycfg, a_ops, m_ops,
                       params.cvt.cvt_offset, params.cvt.cvt_scale, params.cvt.cvt_shift,
                       out_bits, not lut_on)
    if lut_on:
        from hw.nvdla.lut import sdp_y_lut
        looked, _ = sdp_y_lut(flat, y.lut, params.proc_precision.lower())
        flat = cvt_out_array(np.ascontiguousarray(looked, np.int64), params.cvt.cvt_offset,
                             params.cvt.cvt_scale, params.cvt.cvt_shift, out_bits)
    return flat.reshape(shape).astype(np.int8 if out_bits == 8 else np.int16)
