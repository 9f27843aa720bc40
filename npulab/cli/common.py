"""What the commands share: the user error, the config/energy/op options, preset lookup.

Every error a user can cause (bad config value, bad topology line, unknown model) is printed
as one line ``npulab: error: ...`` naming the file, key or line and the value, with exit
status 2 (:func:`npulab.cli.main`); :func:`user_errors` lists the exception types that are the
user's doing. Only light modules are imported here: building a parser (every ``--help``) must
not load numpy or Numba.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hw.presets import chip_preset_names, nvdla_preset_names

def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that are the user's doing: printed as one line (hw.energy.EnergyError is a
    ConfigError). Imported on demand so the parser stays light."""
    from compiler.frontends.scalesim_cfg import ScaleSimConfigError
    from compiler.frontends.scalesim_topology import TopologyError
    from compiler.ir import IRError
    from compiler.backends.systolic_tiling import TilingError
    from hw.nvdla.cycles import CbufCapacityError
    from hw.systolic.config import ConfigError
    return (UserError, ConfigError, IRError, TopologyError, ScaleSimConfigError, FileNotFoundError,
            TilingError, CbufCapacityError)


DEFAULT_MODEL = "resnet18"


class UserError(Exception):
    """An error in what the user asked for; printed as one line."""


def presets_help() -> str:
    """The preset list every ``--config`` help shows, made from the files that ship."""
    return (f"presets: {', '.join(chip_preset_names())}; NVDLA builds: "
            f"{', '.join(nvdla_preset_names())}")


def resolve_config(name_or_path: str | None) -> Path | None:
    """A config path, or the file of a shipped preset (``tpu_v1_like``, ``nv_full``), or None
    (default): :func:`hw.configfile.resolve_chip_path`, as the Python API resolves it."""
    if name_or_path is None:
        return None
    from hw.configfile import resolve_chip_path
    from hw.systolic.config import ConfigError
    try:
        return resolve_chip_path(name_or_path)
    except ConfigError:
        raise UserError(f"--config {name_or_path}: no such file or preset; {presets_help()}") \
            from None


def add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", metavar="FILE|PRESET",
                   help="chip config TOML file or preset name (default: built-in default; "
                        + presets_help() + ")")
    add_set_arg(p)


def add_set_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. --set array.rows=16 (repeatable)")


def add_energy_args(p: argparse.ArgumentParser) -> None:
    from hw.energy import DEFAULT_TECHNOLOGY, DRAM_KINDS, LINK_KINDS, technology_names
    p.add_argument("--tech", metavar="NAME|FILE", default=DEFAULT_TECHNOLOGY,
                   help=f"energy table: {', '.join(technology_names())} or a TOML file of the "
                        f"same format (default {DEFAULT_TECHNOLOGY}; docs/energy.md)")
    p.add_argument("--dram-type", choices=DRAM_KINDS,
                   help="DRAM device for energy (default: from the DRAM preset; ddr4 when the "
                        "config names none)")
    p.add_argument("--link-type", choices=LINK_KINDS, default="pcie",
                   help="host link for energy (default pcie)")


#: The sentinel a bare ``--gemm`` (no M,N,K) parses to; it is an error with a hint.
BARE_GEMM = "<bare>"


def add_op_args(group) -> None:
    """``--gemm M,N,K`` and ``--conv SPEC``: one op as the workload, with the same meaning in
    every command that takes them (``run``, ``map``)."""
    group.add_argument("--gemm", metavar="M,N,K", nargs="?", const=BARE_GEMM,
                       help="one GEMM out(MxN) = A(MxK) @ B(KxN) as the workload, e.g. "
                            "--gemm 1024,1024,1024 (--batch N: N independent GEMMs)")
    group.add_argument("--conv", metavar="SPEC",
                       help="one convolution as the workload: HxWxCIN-COUTkK[xKW][sS][pP][gG], "
                            "e.g. 56x56x64-64k3s1p1 (ResNet-18's conv2_1)")


def add_topology_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology-format", choices=("conv", "gemm"),
                   help="read the topology CSV as conv layers or as GEMM rows (M, N, K) "
                        "(default: detected from its columns)")


def topology_gemm(args) -> bool | None:
    """``--topology-format``: True for GEMM rows, False for conv layers, None to detect."""
    return None if args.topology_format is None else args.topology_format == "gemm"


def check_bare_gemm(gemm: str | None) -> None:
    """``--gemm`` used to mark a topology CSV as GEMM rows; it now takes M,N,K everywhere."""
    if gemm == BARE_GEMM:
        raise UserError("--gemm takes M,N,K (one GEMM as the workload, e.g. --gemm 1024,1024,1024);"
                        " to read a --topology CSV as GEMM rows use --topology-format gemm")
