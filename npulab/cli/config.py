"""``npulab config``: show the effective chip config as TOML, list the shipped presets."""

from __future__ import annotations

import argparse
import sys

from hw.presets import chip_preset_names, nvdla_preset_names
from npulab.cli.common import add_config_args, resolve_config

def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    cfg = sub.add_parser("config", help="inspect configs",
                         description="Inspect chip configs.")
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = cfg_sub.add_parser(
        "show", formatter_class=fmt, help="print the effective config as TOML",
        description="Print the effective chip config (file + --set overrides) as TOML: a "
                    "systolic chip or an NVDLA build.",
        epilog="examples:\n  npulab config show\n  npulab config show --config tpu_v1_like --set array.rows=128"
               "\n  npulab config show --config nv_small --set nvdla.clock_mhz=500",
    )
    add_config_args(show)
    cfg_sub.add_parser("list", help="list the shipped presets", description="List the shipped presets.")
    cfg.set_defaults(config_parser=cfg)


def main(args) -> int:
    if args.config_command == "show":
        from hw.configfile import chip_spec_to_toml, load_chip
        sys.stdout.write(chip_spec_to_toml(load_chip(resolve_config(args.config), args.set)))
        return 0
    if args.config_command == "list":
        print("\n".join(chip_preset_names()))
        print("# NVDLA builds (hw.nvdla.config.load_nvdla_config): "
              + ", ".join(nvdla_preset_names()))
        return 0
    args.config_parser.print_help()             # `npulab config` alone: its help
    return 0
