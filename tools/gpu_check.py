"""GPU verification and first timings, in one device run.

    python tools/gpu_check.py --out $OUT [--matrix] [--ck] [--bench] [--budget-s 480]

--matrix  every layout family x ndim x dtype x op, strides 1/2/3, dilation 2, asymmetric pads, G>1,
          C or K = 1, every fused op, several instances per combination, against float64.
--ck      CK's own test problems (tools/ck_test_problems.yaml) at full size against float64.
--bench   the seed problems: best of the runnable instances vs cuDNN (cudnn.benchmark, channels-last)
          measured in the same run: median ms, TFLOP/s, GB/s, ratio.
Writes results as JSON lines under --out and prints a short table last.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from instance_factory.layouts import all_layouts, layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.registry import get_registry  # noqa: E402
from instance_factory.verify import Case, verify_instance  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEADLINE = [float("inf")]


def _spatial(ndim: int, v: int) -> tuple[int, ...]:
    return (v,) * ndim


def matrix_cases(layout_families: set[str] | None = None) -> list[Case]:
    """The interpreter test matrix at GPU-friendly (still small) sizes."""
    cases = []
    for lt in all_layouts():
        if layout_families and lt.layout_family not in layout_families:
            continue
        nd = lt.ndim
        sp = {1: 33, 2: 17, 3: 9}[nd]
        P = ConvParams
        base = [
            P(nd, 1, 4, 32, 48, _spatial(nd, 3), _spatial(nd, sp), _spatial(nd, 1), _spatial(nd, 1),
              _spatial(nd, 1), _spatial(nd, 1)),
            P(nd, 3, 2, 24, 40, _spatial(nd, 3), _spatial(nd, sp), _spatial(nd, 2), _spatial(nd, 2),
              _spatial(nd, 2), _spatial(nd, 1)),
            P(nd, 2, 3, 17, 1, _spatial(nd, 2), _spatial(nd, sp), _spatial(nd, 3), _spatial(nd, 1),
              _spatial(nd, 0), _spatial(nd, 2)),
        ]
        for op in ("conv_bwd_data", "conv_bwd_weight"):
            dts = ["fp32", "fp32_tf32", "fp16", "bf16"] + (["bf16_fp32w"] if op == "conv_bwd_weight" else [])
            for i, dt in enumerate(dts):
                p = base[i % len(base)]
                cases.append(Case(op, p, lt.name, dt, label=f"{op[5:]} {lt.name} {dt} {p.key()}"))
            fused = [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)]
            fo, nds = fused[(nd + len(lt.layout_family)) % len(fused)]
            cases.append(Case(op, base[1], lt.name, "fp16", fo, nds, label=f"{op[5:]} {lt.name} fp16 {fo}"))
    return cases


def ck_cases(include_large: bool, one_dtype: bool = False, only_large: bool = False,
             dtypes: tuple[str, ...] | None = None, family: str = "nhwgc") -> list[Case]:
    """CK's test problems in one layout family (CK's own tests use the channels-last one)."""
    path = REPO / "tools" / "ck_test_problems.yaml"
    if not path.exists():
        return []
    doc = yaml.safe_load(path.read_text())
    fam_layout = {n: layout_for(family, n).name for n in (1, 2, 3)}
    out = []
    for e in doc["problems"]:
        if (e.get("large") and not include_large) or (only_large and not e.get("large")):
            continue
        p = ConvParams(e["ndim"], e["G"], e["N"], e["K"], e["C"], tuple(e["filter"]), tuple(e["input"]),
                       tuple(e["stride"]), tuple(e["dilation"]), tuple(e["left_pad"]), tuple(e["right_pad"]))
        fo = e.get("fused", "passthrough")
        nds = 1 if fo == "bilinear" else 0
        dts = dtypes or (("fp16", "bf16") if e["op"] == "conv_bwd_data" else ("fp16", "bf16_fp32w"))
        for dt in dts[len(out) % 2:][:1] if one_dtype else dts:  # alternate dtypes when asked
            out.append(Case(e["op"], p, fam_layout[p.ndim], dt, fo, nds, label=f"CK {e['test']} {p.key()} {dt}"))
    return out


def _choose_instances(idx: int, runnable: list, per_case: int, max_algs: int) -> list:
    """A few instances, rotating through the list so different tiles get exercised across cases."""
    by_alg: dict[str, list] = {}
    for inst in runnable:
        by_alg.setdefault(inst.algorithm, []).append(inst)
    chosen = []
    groups = list(by_alg.values())
    groups = [groups[(idx + j) % len(groups)] for j in range(min(max_algs, len(groups)))]
    for group in groups:
        chosen += [group[(idx * 7 + j * 13) % len(group)] for j in range(min(per_case, len(group)))]
    return chosen


def _compile_job(case: Case, name: str) -> str | None:
    """Compile worker (the tuner's compile-only processes): build one instance for one case."""
    from instance_factory.dtypes import op_kwargs
    from instance_factory.fast_launch import compile_only
    from instance_factory.harness.operands import make_problem_tensors
    from instance_factory.ops import prepare
    from instance_factory.tuning import compile_ahead

    if not compile_ahead._WORKER.get("compile_only"):
        return "this Triton cannot compile without running"
    t = make_problem_tensors(case.op, case.params, case.layout, case.dtype, case.n_ds,
                             compile_ahead._WORKER["device"], random=False)
    inst = get_registry().get(name)
    try:
        _, args = prepare(case.op, t["a"], t["b"], case.params, layout=case.layout, ds=t["ds"],
                          fused_op=case.fused_op, instance=inst, **op_kwargs(case.dtype))
        with compile_only():
            inst.alg.launch(args)
    except Exception as exc:  # the verifying process meets it again and records it
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


def run_cases(cases: list[Case], per_case: int, log, max_algs: int = 99, done: set | None = None,
              algorithms: set[str] | None = None, name_globs: list[str] | None = None) -> list[dict]:
    """Verify the chosen instances of every case; compile ahead in worker processes (Triton's disk
    cache), skipping (case, instance) pairs in ``done`` (passed in an earlier run)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from instance_factory.tuning.compile_ahead import precompile_fits, precompile_init

    reg = get_registry()
    plan = []
    for idx, case in enumerate(cases):
        runnable, declined = reg.candidates(case.op, case.params, case.layout, case.dtype, case.fused_op)
        if algorithms:
            runnable = [i for i in runnable if i.algorithm in algorithms]
        if name_globs:  # e.g. only a family's new configs
            runnable = [i for i in runnable if any(fnmatch.fnmatch(i.name, g) for g in name_globs)]
        if (algorithms or name_globs) and not runnable:
            continue
        chosen = [i for i in _choose_instances(idx, runnable, per_case, max_algs)
                  if (case.title, i.name) not in (done or set())]
        plan.append((idx, case, chosen, declined if not runnable else None))
    workers = max(1, min(15, (os.cpu_count() or 2) - 1))
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                               initializer=precompile_init, initargs=(f"cuda:{torch.cuda.current_device()}",))
    device = torch.device(f"cuda:{torch.cuda.current_device()}")
    jobs = {(case.title, inst.name): pool.submit(_compile_job, case, inst.name)
            for _, case, chosen, _ in plan if precompile_fits(case.params, workers, device)
            for inst in chosen}
    rows = []
    for idx, case, chosen, declined in plan:
        if declined is not None:
            rows.append({"case": case.title, "status": "NO INSTANCE", "reasons": sorted({r for _, r in declined})[:3]})
            continue
        for inst in chosen:
            if time.time() > DEADLINE[0]:
                rows.append({"case": case.title, "instance": inst.name, "status": "SKIPPED (time budget)"})
                log.write(json.dumps(rows[-1]) + "\n")
                continue
            try:
                job = jobs.get((case.title, inst.name))
                if job is not None:
                    job.result(timeout=max(1.0, DEADLINE[0] - time.time()))
            except Exception:  # compiling here instead
                pass
            row = {"case": case.title, "op": case.op, "problem": case.params.key(), "layout": case.layout,
                   "dtype": case.dtype, "fused_op": case.fused_op, "instance": inst.name,
                   "kernel_hash": inst.kernel_hash, "backend": "gpu"}
            try:
                r = verify_instance(inst, case, "cuda", seed=idx)
                row.update(error=r.error, tol=r.tolerance, status="PASS" if r.passed else "FAIL")
            except Exception as exc:  # record, keep going
                row.update(error=float("nan"), status=f"ERROR {type(exc).__name__}: {str(exc)[:200]}")
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
    pool.shutdown(wait=False, cancel_futures=True)
    return rows


def _passed_before(paths: list[str]) -> set:
    """(case title, instance) pairs that passed in earlier gpu_check logs with the instance's
    current kernel hash (a changed kernel is verified again)."""
    reg = get_registry()
    done = set()
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "PASS":
                continue
            try:
                inst = reg.get(r["instance"])
            except KeyError:  # left the registry
                continue
            if r.get("kernel_hash") == inst.kernel_hash:
                done.add((r["case"], r["instance"]))
    return done


def bench(out_dir: Path, log, ops: tuple[str, ...], labels: tuple[str, ...] = ()) -> list[dict]:
    import triton.testing

    from instance_factory.harness.checks import run_poisoned
    from instance_factory.harness.cudnn import time_torch
    from instance_factory.harness.operands import ProblemCase, make_problem_tensors, reference_of
    from instance_factory.ops import prepare
    from instance_factory.reference import rel_error
    from instance_factory.tuning.problem_sets import Problem

    torch.backends.cudnn.benchmark = True
    seeds = [
        ("seed s2", "conv_bwd_data", ConvParams(2, 1, 128, 256, 128, (3, 3), (71, 71), (2, 2), (1, 1), (1, 1), (1, 1)), "fp16", "passthrough"),
        ("seed s2 +add", "conv_bwd_data", ConvParams(2, 1, 128, 256, 128, (3, 3), (71, 71), (2, 2), (1, 1), (1, 1), (1, 1)), "fp16", "add"),
        ("r50 3x3 c64", "conv_bwd_data", ConvParams(2, 1, 128, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), "fp16", "passthrough"),
        ("dense bf16", "conv_bwd_weight", ConvParams(2, 1, 128, 256, 128, (3, 3), (71, 71), (2, 2), (1, 1), (1, 1), (1, 1)), "bf16", "passthrough"),
        ("resnext 32x4", "conv_bwd_weight", ConvParams(2, 32, 128, 4, 4, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), "bf16", "passthrough"),
        ("depthwise 144", "conv_bwd_weight", ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), "bf16", "passthrough"),
        ("depthwise 144", "conv_bwd_data", ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), "bf16", "passthrough"),
    ]
    layout = "NHWGC/GKYXC/NHWGK"
    reg = get_registry()
    rows = []
    for label, op, p, dt, fo in seeds:
        if time.time() > DEADLINE[0]:
            break
        if op not in ops or (labels and label not in labels):
            continue
        nds = 1 if fo == "add" else 0
        t = make_problem_tensors(op, p, layout, dt, nds, "cuda", seed=1)
        runnable, _ = reg.candidates(op, p, layout, dt, fo)
        runnable.sort(key=lambda i: i.algorithm not in ("direct", "depthwise"))  # the memory-bound path first where it applies
        best = None
        for inst in runnable:
            if time.time() > DEADLINE[0]:
                break
            try:
                _, args = prepare(op, t["a"], t["b"], p, layout=layout, ds=t["ds"], fused_op=fo, instance=inst)
                runner = inst.alg.bind(args)

                def launch(args, runner=runner):
                    runner(args.a, args.b, args.out, args.ds, args.alpha, args.beta)

                launch(args)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                launch(args)
                torch.cuda.synchronize()
                once_ms = (time.perf_counter() - t0) * 1e3
                if best is not None and once_ms > 5 * best[1] + 0.05:  # hopeless: skip the full timing
                    log.write(json.dumps({"bench": label, "instance": inst.name, "once_ms": once_ms}) + "\n")
                    continue
                ms = triton.testing.do_bench(lambda launch=launch, args=args: launch(args), warmup=25, rep=100, return_mode="median")
            except Exception as exc:
                log.write(json.dumps({"bench": label, "instance": inst.name, "error": str(exc)[:200]}) + "\n")
                continue
            log.write(json.dumps({"bench": label, "instance": inst.name, "ms": ms}) + "\n")
            if best is None or ms < best[1]:
                best = (inst, ms, args)
        if best is None:
            continue
        inst, ms, args = best
        # verify the winner on these very inputs (the harness's poisoned run), then cuDNN in the same run
        case = ProblemCase(Problem(op, p, layout, dt, fo), torch.device("cuda", torch.cuda.current_device()),
                           t["a"], t["b"], t["ds"], None, {}, fo, nds, 1.0, 1.0)
        out, _ = run_poisoned(case, inst)
        err = rel_error(out, reference_of(op, p, layout, t["a"], t["b"], t["ds"], fo, 1.0, 1.0))
        cudnn_ms, _, cudnn_err = time_torch(case, 25.0, 100.0, 1)
        if cudnn_ms is None:
            log.write(json.dumps({"bench": label, "cudnn_error": cudnn_err}) + "\n")
            continue
        eb = 2 if dt != "fp32" else 4
        gb = p.bytes_moved(op, eb, nds, 4 if dt == "bf16_fp32w" else None) / (ms * 1e-3) / 1e9
        row = {"bench": label, "op": op, "problem": p.key(), "dtype": dt, "fused_op": fo, "best": inst.name,
               "ms": ms, "tflops": p.flops() / (ms * 1e-3) / 1e12, "gbps": gb, "cudnn_ms": cudnn_ms,
               "ratio_vs_cudnn": cudnn_ms / ms, "error": err, "candidates": len(runnable)}
        rows.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
    return rows


def fp8_cases() -> list[Case]:
    """fp16 data, fp8 tensor-core compute (bwd weight only; sm_89+)."""
    P = ConvParams
    return [
        Case("conv_bwd_weight", P(2, 1, 8, 64, 64, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)),
             "NHWGC/GKYXC/NHWGK", "fp16_fp8", label="fp8 2D 3x3"),
        Case("conv_bwd_weight", P(3, 2, 2, 32, 32, (3, 3, 3), (9, 9, 9), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
             "NDHWGC/GKZYXC/NDHWGK", "fp16_fp8", "bilinear", 1, label="fp8 3D bilinear"),
        Case("conv_bwd_weight", P(1, 1, 4, 64, 32, (3,), (200,), (2,), (1,), (1,), (1,)),
             "GNWC/GKXC/GNWK", "fp16_fp8", label="fp8 1D"),
    ]


def large_cases() -> list[Case]:
    """Tensors past 2**31 elements: the 64-bit offset paths, against float64 on the GPU."""
    P = ConvParams
    return [
        # grad_in and grad_out of 64*64*1024*512 = 2**31 elements each
        Case("conv_bwd_data", P(2, 1, 64, 64, 64, (3, 3), (1024, 512), (1, 1), (1, 1), (1, 1), (1, 1)),
             "NHWGC/GKYXC/NHWGK", "fp16", label="large bwd data 2^31-element tensors"),
        Case("conv_bwd_weight", P(2, 1, 1, 8, 8, (1, 1), (23000, 12000), (1, 1), (1, 1), (0, 0), (0, 0)),
             "NHWGC/GKYXC/NHWGK", "bf16_fp32w", label="large bwd weight 2.2e9-element input"),
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_out"))
    ap.add_argument("--matrix", action="store_true")
    ap.add_argument("--ck", action="store_true")
    ap.add_argument("--ck-large", action="store_true", help="include CK's large (> 2^28 elements) problems")
    ap.add_argument("--ck-only-large", action="store_true", help="only CK's large problems")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--per-case", type=int, default=2)
    ap.add_argument("--labels", help="comma-separated bench labels to run (default all)")
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    ap.add_argument("--families", help="comma-separated layout families for --matrix (default all)")
    ap.add_argument("--max-algs", type=int, default=99, help="kernel families tried per case")
    ap.add_argument("--ck-one-dtype", action="store_true", help="one dtype per CK problem, alternating")
    ap.add_argument("--ck-family", default="nhwgc", help="layout family of the CK problems (CK's tests: nhwgc)")
    ap.add_argument("--ck-dtypes", default="", help="comma-separated dtypes for the CK problems (default: fp16 and "
                                                     "bf16 for data, fp16 and bf16_fp32w for weight)")
    ap.add_argument("--algorithms", help="comma-separated kernel families: verify only these (cases where "
                    "none applies are left out)")
    ap.add_argument("--instances", help="comma-separated globs on instance names: verify only those")
    ap.add_argument("--ops", default="conv_bwd_data,conv_bwd_weight", help="ops to bench")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--skip-passed", nargs="*", default=[], help="earlier gpu_check logs: skip what passed there")
    ns = ap.parse_args()
    DEADLINE[0] = time.time() + ns.budget_s
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.cuda.get_device_name()
    import triton

    meta = {"device": dev, "torch": torch.__version__, "triton": triton.__version__,
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count, "date": time.strftime("%F %T")}
    print(json.dumps(meta), flush=True)
    summary = []
    with open(out / f"gpu_check{ns.tag}.jsonl", "w") as log:
        log.write(json.dumps(meta) + "\n")
        layout_families = set(ns.families.split(",")) if ns.families else None
        for flag, name, cases in ((ns.matrix, "matrix", lambda: matrix_cases(layout_families)),
                                  (ns.ck, "ck", lambda: [c for c in ck_cases(ns.ck_large or ns.ck_only_large, ns.ck_one_dtype, ns.ck_only_large,
                                                                      tuple(ns.ck_dtypes.split(",")) if ns.ck_dtypes else None,
                                                                      ns.ck_family)
                                                   if c.op in ns.ops]),
                                  (ns.fp8, "fp8", fp8_cases), (ns.large, "large", lambda: [c for c in large_cases() if c.op in ns.ops])):
            if not flag:
                continue
            t0 = time.time()
            rows = run_cases(cases(), ns.per_case, log, ns.max_algs, _passed_before(ns.skip_passed),
                             set(ns.algorithms.split(",")) if ns.algorithms else None,
                             ns.instances.split(",") if ns.instances else None)
            done = [r for r in rows if "error" in r]
            bad = [r for r in rows if r.get("status") != "PASS"]  # failed, errors, skipped (time budget)
            worst = max((r["error"] for r in done if r["error"] == r["error"]), default=float("nan"))
            passed = sum(r.get("status") == "PASS" for r in rows)
            summary.append(f"{name}: {len(done)} instance runs, {passed} pass, {len(bad)} not passing or skipped, "
                           f"worst error {worst:.2e}, {time.time() - t0:.0f}s")
            for r in bad[:15]:
                print("  NOT PASS:", r.get("case"), r.get("instance", ""), r.get("status"), r.get("error", ""))
        if ns.bench:
            rows = bench(out, log, tuple(ns.ops.split(",")), tuple(ns.labels.split(",")) if ns.labels else ())
            summary.append("bench (ms ours / ms cuDNN -> ratio > 1 means faster than cuDNN):")
            for r in rows:
                summary.append(f"  {r['bench']:14s} {r['op'][5:]:12s} {r['dtype']:10s} ours {r['ms']:.4f} ms "
                               f"{r['tflops']:.0f} TF/s {r['gbps']:.0f} GB/s | cuDNN {r['cudnn_ms']:.4f} ms | "
                               f"ratio {r['ratio_vs_cudnn']:.2f} | err {r['error']:.1e} | {r['best']}")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
