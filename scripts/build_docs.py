#!/usr/bin/env python3
"""Build the user guide as a static site and prove it true, in one command.

    pip install '.[docs]'
    python scripts/build_docs.py            # -> site/index.html

1. The generated reference pages (``docs/reference/config.md`` from the config dataclasses,
   ``docs/reference/cli.md`` from the argument parser) must match the code (``--regen`` rewrites
   them).
2. ``mkdocs build --strict`` builds ``site/``; a broken link, a missing anchor or a page left out
   of the navigation fails the build.
3. Every example in ``README.md`` and ``docs/`` runs exactly as written and its output is compared
   (``scripts/doccheck.py``); ``--no-examples`` skips this step, ``--labs`` adds the lab sheets.

Exit status 0 when all steps passed. CI runs it through ``tests/docs/test_docs_build.py``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import doccheck  # noqa: E402
import gen_cli_reference  # noqa: E402
import gen_config_reference  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site-dir", default=str(ROOT / "site"), help="output directory (default site/)")
    ap.add_argument("--regen", action="store_true", help="rewrite the generated reference pages")
    ap.add_argument("--no-examples", action="store_true", help="build only; do not run the examples")
    ap.add_argument("--labs", action="store_true", help="also run the lab sheets' examples")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="pages run at once (default: the number of cores)")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    for gen in (gen_config_reference, gen_cli_reference):
        status = gen.main([] if args.regen else ["--check"])
        if status:
            return status
    print("build_docs: generated reference pages are up to date")

    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", args.site_dir],
                          cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode:
        print(proc.stdout, end="")
        print("build_docs: mkdocs build --strict failed (see the warnings above)", file=sys.stderr)
        return 1
    print(f"build_docs: site built in {args.site_dir}")
    if args.no_examples:
        return 0

    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    if args.labs:
        pages += sorted((ROOT / "examples" / "labs").glob("*/README.md"))
    # NVIDIA's trace tests (nvdla.md): where npulab looks beside this checkout, made explicit
    # because the examples run in a temporary directory
    from hw.nvdla.trace import default_trace_dir
    env = dict(os.environ)
    traces = default_trace_dir(ROOT)
    if traces.is_dir():
        env["NPULAB_NVDLA_TRACES"] = str(traces.resolve())
    ran, skipped, failures = doccheck.check_files(pages, ROOT, env=env, jobs=args.jobs)
    for f in failures:
        print(f"\nFAILED {f}", file=sys.stderr)
    print(f"build_docs: {ran} examples run, {skipped} skipped, {len(failures)} failed "
          f"({time.monotonic() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
