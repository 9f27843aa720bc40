"""``npulab plan``: the plan search from the command line (:mod:`npulab.cli.plan`,
:mod:`npulab.plan_run`).

Gold: ``npulab system`` run on the found plan's ``--strategy`` text (the same step); the
search's own brute-force equality is tested in tests/compiler/test_parallel_search.py. Every
view (table, JSON, CSV) must show the same numbers.
"""

import csv
import json

import pytest

from npulab.cli import main

ARGS = ("plan", "--system", "hgx-a100-4", "--model", "gpt2-small", "--global-batch", "16",
        "--micro-batch", "1,2", "--verify", "1")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """One search, as JSON and written to a directory."""
    import contextlib
    import io
    d = tmp_path_factory.mktemp("plan")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(list(ARGS) + ["--format", "json", "-o", str(d / "out")]) == 0
    return json.loads(buf.getvalue()), d / "out"


def test_found_plan_reruns_in_npulab_system(found, capsys):
    """The best plan's --strategy and --micro-batch, given to npulab system, give its step."""
    js, _ = found
    best = js["best"]
    code, out, err = run(capsys, "system", "--system", "hgx-a100-4", "--model", "gpt2-small",
                         "--global-batch", "16", "--micro-batch", str(best["micro_batch"]),
                         "--strategy", best["strategy"], "--comm", "analytic", "--sharding",
                         "ilp", "--format", "json")
    assert code == 0, err
    sysjs = json.loads(out)
    assert sysjs["step_s"] == pytest.approx(best["step_s"], rel=1e-12)
    assert js["simulated"] >= 1 and js["space"] > 50 and js["n_devices"] == 4
    assert js["pruned_memory"] + js["pruned_bound"] + js["simulated"] == js["space"]
    assert js["verified"][0]["strategy"] == best["strategy"]
    assert js["verified"][0]["sim_step_s"] > 0


def test_every_view_shows_the_same_numbers(found, capsys):
    js, out_dir = found
    code, table, err = run(capsys, *ARGS)
    assert code == 0, err
    best = js["best"]
    assert f"best plan: --strategy {best['strategy']} --micro-batch {best['micro_batch']}" \
        in table
    assert f"{best['step_s'] * 1e3:,.1f} ms" in table
    with open(out_dir / "plans.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == js["simulated"]
    assert float(rows[0]["step_s"]) == best["step_s"] and rows[0]["strategy"] == best["strategy"]
    with open(out_dir / "pareto.csv") as fh:
        pareto = list(csv.DictReader(fh))
    assert [float(r["memory_bytes"]) for r in pareto] == [c["memory_bytes"] for c in js["pareto"]]
    saved = json.loads((out_dir / "search.json").read_text())
    assert saved["best"]["step_s"] == best["step_s"]
    with open(out_dir / "shapes.csv") as fh:
        shapes = list(csv.DictReader(fh))
    assert {(int(r["dp"]), int(r["tp"]), int(r["pp"])) for r in shapes} == {
        (1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)}


def test_compare_times_a_hand_written_plan(capsys):
    code, out, err = run(capsys, *ARGS, "--compare", "pp=4@1", "--format", "json")
    assert code == 0, err
    js = json.loads(out)
    c = js["compared"][0]
    assert c["strategy"] == "dp=1,tp=1,pp=4" and c["micro_batch"] == 1
    assert c["best_speedup"] == pytest.approx(c["step_s"] / js["best"]["step_s"])
    assert c["best_speedup"] >= 1.0 - 1e-12        # the search's best is at least as fast


@pytest.mark.parametrize("argv, msg", [
    (("--model", "resnet50"), "the plan search splits transformer layers"),
    (("--tp", "a"), "--tp 'a': expected integers"),
    (("--chips", "9"), "--chips 9: must be an integer in 1..4"),
    (("--recompute", "some"), "recompute"),
    (("--compare", "dp=2@x"), "the micro-batch after '@' must be an integer"),
    (("--compare", "dp=2"), "dp*tp*pp = 2; the search has 4 chips"),
    (("--compare", "dp=4,m=2@1"), "dp x m x micro-batch = 8, not the searched global batch 16: "
                                  "drop m= (it follows from the batch) or give m = 4"),
    (("--global-batch", "0"), "--global-batch 0: must be an integer >= 1"),
])
def test_bad_input_is_one_line(capsys, argv, msg):
    base = ["plan", "--system", "hgx-a100-4", "--model", "gpt2-small", "--global-batch", "16"]
    args = list(base)
    for i in range(0, len(argv), 2):
        if argv[i] in args:
            args[args.index(argv[i]) + 1] = argv[i + 1]
        else:
            args += [argv[i], argv[i + 1]]
    try:
        code = main(args)
    except SystemExit as exc:       # argparse's own errors
        code = exc.code
    _, err = capsys.readouterr()
    assert code == 2 and msg in err and err.count("\n") == 1, err


def test_global_batches_rank_by_goodput(capsys):
    """Several global batches: each searched; goodput = samples/s x (B + M0)/(B + M)."""
    code, out, err = run(capsys, "plan", "--system", "hgx-a100-4", "--model", "gpt2-small",
                         "--global-batch", "8,32", "--noise-scale", "16", "--micro-batch", "1,2",
                         "--verify", "0", "--format", "json")
    assert code == 0, err
    js = json.loads(out)
    rows = js["global_batches"]
    assert [r["global_batch"] for r in rows] == [8, 32] and js["noise_scale"] == 16
    assert rows[0]["efficiency"] == 1.0
    assert rows[1]["efficiency"] == pytest.approx((16 + 8) / (16 + 32))
    for r in rows:
        assert r["goodput"] == pytest.approx(r["samples_per_s"] * r["efficiency"])
    best = max(rows, key=lambda r: r["goodput"])
    assert js["global_batch"] == best["global_batch"]


def test_system_input_pipeline_and_compression(capsys):
    """npulab system --input / --compression: the JSON carries the wait and the compressed
    bytes; prefetch=0 adds the whole load to the step."""
    base = ["system", "--system", "hgx-a100-4", "--model", "resnet18", "--strategy", "dp=4",
            "--batch", "8", "--comm", "analytic", "--format", "json"]
    code, out, err = run(capsys, *base)
    plain = json.loads(out)
    code, out, err = run(capsys, *base, "--input", "sample_bytes=110000,prefetch=0",
                         "--compression", "int8")
    assert code == 0, err
    js = json.loads(out)
    assert js["input_s"] == pytest.approx(js["input_load_s"]) and js["input_s"] > 0
    # hgx-a100-4's host link (PCIe Gen4 x16 at 80 %) feeds the host-to-device copy
    assert js["input_pipeline"]["host_link_gbps"] == pytest.approx(31.5 * 0.8)
    assert js["comm_bytes"]["dp"] == pytest.approx(plain["comm_bytes"]["dp"] / 2 + 4, rel=1e-9)
    code, out, err = run(capsys, *base[:-2], "--compression", "topk,density=2")
    assert code == 2 and "density = 2.0: must be a number in (0, 1]" in err


def test_system_writes_summary_trace_and_report(tmp_path, capsys):
    """npulab system -o DIR: summary.json with the table's numbers, a valid Perfetto trace
    with one track group per rank ending at the step, and report.html."""
    from npulab.timeline import validate_trace
    out = tmp_path / "o"
    code, text, err = run(capsys, "system", "--system", "hgx-a100-4", "--model", "gpt2-small",
                          "--strategy", "dp=2,pp=2", "--global-batch", "8", "--comm",
                          "analytic", "-o", str(out))
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert f"{summary['step_s'] * 1e3:,.3f} ms" in text
    trace = json.loads((out / "trace.json").read_text())
    validate_trace(trace)
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"rank 0 (stage 0)", "rank 1 (stage 0)", "rank 2 (stage 1)",
                     "rank 3 (stage 1)"}            # one track group per rank
    assert trace["otherData"]["track_groups"] == "rank"
    end = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert end == pytest.approx(summary["step_s"] * 1e6, rel=1e-9)
    page = (out / "report.html").read_text()
    assert f"{summary['step_s'] * 1e3:,.3f} ms" in page and "<svg" in page


def test_a_closed_pipe_is_not_an_error():
    """``npulab plan ... | head -c 0``: the reader is gone before the first line is written;
    no traceback, status 0."""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "npulab", *ARGS, "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with proc:
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err


def test_a_plan_megatron_cannot_make_reruns_with_the_ilp_sharding(capsys):
    """GPT-2's 12 heads on 4 ranks with the plan's own sharding: npulab system --sharding ilp
    gives the step the search printed (Megatron's split would differ)."""
    code, out, err = run(capsys, "plan", "--system", "dgx-a100", "--model", "gpt2-small",
                         "--global-batch", "64", "--tp", "4", "--pp", "1", "--micro-batch", "1",
                         "--zero", "0", "--recompute", "none", "--verify", "0", "--format",
                         "json")
    js = json.loads(out)
    best = js["best"]
    assert not best["layer_plan"]["megatron"]
    argv = ["system", "--system", "dgx-a100", "--model", "gpt2-small", "--global-batch", "64",
            "--micro-batch", "1", "--strategy", best["strategy"], "--comm", "analytic",
            "--format", "json"]
    code, out, err = run(capsys, *argv, "--sharding", "ilp")
    assert json.loads(out)["step_s"] == pytest.approx(best["step_s"], rel=1e-12)
    code, out, err = run(capsys, *argv)
    assert json.loads(out)["step_s"] != pytest.approx(best["step_s"], rel=1e-6)


def test_system_header_names_interleaving_uneven_stages_and_offload(capsys):
    code, out, err = run(capsys, "system", "--system", "hgx-a100-4", "--model", "gpt2-small",
                         "--global-batch", "8", "--comm", "analytic", "--strategy",
                         "dp=2,pp=2,zero=1,offload=true,stage_layers=5/7")
    assert code == 0, err
    assert "1f1b stages 5/7, offload, recompute=none" in out.splitlines()[0]
    code, out, err = run(capsys, "system", "--system", "hgx-a100-4", "--model", "gpt2-small",
                         "--global-batch", "8", "--comm", "analytic", "--strategy",
                         "pp=2,v=2,dp=2")
    assert "1f1b v=2, recompute" in out.splitlines()[0]
