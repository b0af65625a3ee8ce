"""Where a call's time goes on the GPU: host cost per stage, and kernel time with and without CUDA graphs.

    python tools/overhead_probe.py --out $OUT

Part 1 (host): us per call of each stage in a tight loop on a tiny problem (the GPU work is ~3 us,
so the loop is host-bound): lookup hit, prepare, the launcher, the full public call, a bare Triton
launch with 3 and 45 arguments, a direct CompiledKernel launch, torch.empty, and cuDNN's call.
Part 2 (device): do_bench vs do_bench_cudagraph for the same instances on small layers, to tell
per-call host cost from kernel time. Writes JSON lines and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import triton
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import instance_factory as inf  # noqa: E402
from instance_factory.harness.operands import make_problem_tensors  # noqa: E402
from instance_factory.ops import prepare  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.registry import get_registry  # noqa: E402

LAYOUT = "NHWGC/GKYXC/NHWGK"


@triton.jit
def _k3(a, b, n):
    pass


@triton.jit
def _k45(a, b, c, d, e, f, g, h, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, j0, j1, j2, j3, j4, j5, j6, j7, j8,
         j9, k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, m0, m1, m2, m3, m4, m5, m6):
    pass


def per_call_us(fn, n: int = 2000, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean us per call of ``n`` back-to-back calls (one round is easily
    disturbed by clocks or another process)."""
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(times)[len(times) // 2]


def host_part(rows: list) -> None:
    p = ConvParams(2, 1, 1, 16, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    x = torch.empty(16, device="cuda")
    ints = list(range(37))
    stages = {}
    for op, fn in (("conv_bwd_data", inf.conv_bwd_data), ("conv_bwd_weight", inf.conv_bwd_weight)):
        t = make_problem_tensors(op, p, LAYOUT, "fp16", 0, "cuda")
        inst = inf.lookup(op, p, layout=LAYOUT, dtype=torch.float16)
        _, args = prepare(op, t["a"], t["b"], p, layout=LAYOUT, instance=inst)
        runner = inst.alg.bind(args)
        short = op[len("conv_"):]
        rows.append({"stage": f"{short}: served instance", "instance": inst.name})
        stages.update({
            f"{short}: lookup hit": lambda op=op: inf.lookup(op, p, layout=LAYOUT, dtype=torch.float16),
            f"{short}: prepare(instance=inst)": lambda op=op, t=t, inst=inst: prepare(
                op, t["a"], t["b"], p, layout=LAYOUT, instance=inst),
            f"{short}: launch, bind + run (no cache)": lambda inst=inst, args=args: inst.alg.launch(args),
            f"{short}: launch, cached runner": lambda r=runner, a=args: r(a.a, a.b, a.out, a.ds, 1.0, 1.0),
            f"{short}: public call, instance=None": lambda fn=fn, t=t: fn(t["a"], t["b"], p, layout=LAYOUT),
            f"{short}: public call, instance=inst": lambda fn=fn, t=t, inst=inst: fn(t["a"], t["b"], p,
                                                                                    layout=LAYOUT, instance=inst),
        })
        # the runner's GPU time alone (a CUDA graph has no host cost): tells a host-bound loop from a kernel
        run = lambda r=runner, a=args: r(a.a, a.b, a.out, a.ds, 1.0, 1.0)  # noqa: E731
        with torch.cuda.stream(torch.cuda.Stream()):
            us = triton.testing.do_bench_cudagraph(run, rep=100, return_mode="median") * 1e3
        rows.append({"stage": f"{short}: served instance's kernels in a CUDA graph", "us_per_call": us})
    stages.update({
        "triton launch, 3 args": lambda: _k3[(1,)](x, x, 5),
        "triton launch, 45 args": lambda: _k45[(1,)](x, x, x, x, x, x, x, x, *ints),
        "torch.empty": lambda: torch.empty((1, 8, 8, 1, 16), dtype=torch.float16, device="cuda"),
    })
    # a CompiledKernel launched directly (what a cached bound launch would cost)
    try:
        ck = _k45[(1,)](x, x, x, x, x, x, x, x, *ints)
        allargs = (x, x, x, x, x, x, x, x, *ints)
        ck_runner = ck[(1, 1, 1)]
        ck_runner(*allargs)
        stages["CompiledKernel[grid](*args), 45 args"] = lambda: ck_runner(*allargs)
        stream = torch.cuda.current_stream().cuda_stream
        md = ck.launch_metadata((1, 1, 1), stream, *allargs)
        stages["CompiledKernel.run raw, 45 args"] = lambda: ck.run(1, 1, 1, stream, ck.function, ck.packed_metadata,
                                                                  md, None, None, *allargs)
    except Exception as exc:  # API differs between Triton versions: report, keep going
        rows.append({"stage": "CompiledKernel direct", "error": f"{type(exc).__name__}: {exc}"[:300]})
    w = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    dy = torch.randn(1, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    xx = torch.randn(1, 16, 8, 8, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    for short, mask in (("bwd_data", [True, False, False]), ("bwd_weight", [False, True, False])):
        cudnn = lambda m=mask: torch.ops.aten.convolution_backward(  # noqa: E731
            dy, xx, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, m)
        stages[f"{short}: cuDNN aten.convolution_backward"] = cudnn
        cudnn()
        with torch.cuda.stream(torch.cuda.Stream()):
            us = triton.testing.do_bench_cudagraph(cudnn, rep=100, return_mode="median") * 1e3
        rows.append({"stage": f"{short}: cuDNN's kernels in a CUDA graph", "us_per_call": us})
    for name, fn in stages.items():
        try:
            us = per_call_us(fn)
            rows.append({"stage": name, "us_per_call": us})
        except Exception as exc:
            rows.append({"stage": name, "error": f"{type(exc).__name__}: {exc}"[:300]})


def device_part(rows: list, max_inst: int) -> None:
    torch.backends.cudnn.benchmark = True
    P = ConvParams
    probs = [
        ("tiny 16x16 8x8", "conv_bwd_data", P(2, 1, 1, 16, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))),
        ("mnv2 1x1 C960 K160 7x7", "conv_bwd_data", P(2, 1, 128, 160, 960, (1, 1), (7, 7), (1, 1), (1, 1), (0, 0), (0, 0))),
        ("mnv2 1x1 C960 K160 7x7", "conv_bwd_weight", P(2, 1, 128, 160, 960, (1, 1), (7, 7), (1, 1), (1, 1), (0, 0), (0, 0))),
        ("r50 3x3 C64 56x56", "conv_bwd_data", P(2, 1, 128, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))),
    ]
    reg = get_registry()
    for label, op, p in probs:
        t = make_problem_tensors(op, p, LAYOUT, "bf16", 0, "cuda")
        runnable, _ = reg.candidates(op, p, LAYOUT, "bf16", "passthrough")
        step = max(1, len(runnable) // max_inst)
        for inst in runnable[::step][:max_inst]:
            _, args = prepare(op, t["a"], t["b"], p, layout=LAYOUT, instance=inst)
            run = inst.alg.bind(args)
            fn = lambda run=run, args=args: run(args.a, args.b, args.out, args.ds, 1.0, 1.0)  # noqa: E731
            try:
                fn()
                ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                with torch.cuda.stream(torch.cuda.Stream()):
                    msg = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
                rows.append({"problem": label, "op": op, "instance": inst.name, "do_bench_ms": ms,
                             "cudagraph_ms": msg})
            except Exception as exc:
                rows.append({"problem": label, "op": op, "instance": inst.name, "error": str(exc)[:200]})
        # cuDNN, same two ways
        x = torch.randn(p.N, p.C, *p.input, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.randn(p.K, p.C, *p.filter, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        dy = torch.randn(p.N, p.K, *p.output, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        mask = [op == "conv_bwd_data", op == "conv_bwd_weight", False]
        fn = lambda dy=dy, x=x, w=w, p=p, mask=mask: torch.ops.aten.convolution_backward(  # noqa: E731
            dy, x, w, None, list(p.stride), list(p.left_pad), list(p.dilation), False, [0] * p.ndim, p.G, mask)
        fn()
        ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        with torch.cuda.stream(torch.cuda.Stream()):
            msg = triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
        rows.append({"problem": label, "op": op, "instance": "cuDNN", "do_bench_ms": ms, "cudagraph_ms": msg})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_out"))
    ap.add_argument("--max-inst", type=int, default=4)
    ns = ap.parse_args()
    warnings.simplefilter("ignore")
    rows: list = []
    host_part(rows)
    device_part(rows, ns.max_inst)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "date": time.strftime("%F %T")}
    with open(out / "overhead_probe.jsonl", "w") as f:
        for r in [meta, *rows]:
            f.write(json.dumps(r) + "\n")
    print(json.dumps(meta))
    for r in rows:
        if "stage" in r:
            value = (f"{r['us_per_call']:8.2f} us" if "us_per_call" in r
                     else r.get("instance") or r.get("error"))
            print(f"  host {r['stage']:52s} {value}")
        else:
            print(f"  {r['problem']:24s} {r['op'][5:]:12s} {r['instance'][:60]:60s} "
                  + (f"do_bench {r['do_bench_ms'] * 1e3:8.1f} us  graph {r['cudagraph_ms'] * 1e3:8.1f} us"
                     if "do_bench_ms" in r else r["error"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
