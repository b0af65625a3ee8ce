"""Where does depthwise bwd-weight time go? Per-kernel GPU times (torch.profiler), a streaming-read
baseline over the same bytes, and the time's scaling with the number of taps (GPU only)."""

from __future__ import annotations

import json
import os
import shutil

import torch
import triton
import triton.language as tl
import triton.testing

from instance_factory.harness.operands import make_problem_tensors
from instance_factory.ops import prepare
from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry

LAYOUT = "NHWGC/GKYXC/NHWGK"


@triton.jit
def _stream_sum(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    s = tl.load(a_ptr + offs, mask=m, other=0.0).to(tl.float32) * tl.load(b_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.atomic_add(out_ptr + (tl.program_id(0) % 1024), tl.sum(s, axis=0))


def time_instance(name: str, p: ConvParams) -> tuple[float, dict]:
    inst = get_registry().get(name)
    t = make_problem_tensors("conv_bwd_weight", p, LAYOUT, "bf16", 0, "cuda", seed=1)
    _, args = prepare("conv_bwd_weight", t["a"], t["b"], p, layout=LAYOUT, instance=inst)
    run = inst.alg.bind(args)

    def go():
        run(args.a, args.b, args.out, args.ds, 1.0, 0.0)

    go()
    ms = triton.testing.do_bench(go, warmup=25, rep=100, return_mode="median")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            go()
        torch.cuda.synchronize()
    kern = {e.key[:40]: e.device_time_total / e.count / 1e3 for e in prof.key_averages() if e.device_time_total > 0}
    return ms, kern


def main() -> None:
    import sys

    if len(sys.argv) > 1:  # --once NAME: one launch of one instance on the 3x3 problem (under ncu)
        p = ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
        inst = get_registry().get(sys.argv[2])
        t = make_problem_tensors("conv_bwd_weight", p, LAYOUT, "bf16", 0, "cuda", seed=1)
        _, args = prepare("conv_bwd_weight", t["a"], t["b"], p, layout=LAYOUT, instance=inst)
        inst.alg.launch(args)
        torch.cuda.synchronize()
        return
    out = os.environ.get("OUT", ".")
    rows = []
    print("ncu:", shutil.which("ncu"), "nsys:", shutil.which("nsys"))
    big = ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    x = torch.randn(big.numel("input"), device="cuda", dtype=torch.bfloat16)
    y = torch.randn(big.numel("output"), device="cuda", dtype=torch.bfloat16)
    acc = torch.zeros(1024, device="cuda")
    for block in (1024, 4096):
        ms = triton.testing.do_bench(lambda b=block: _stream_sum[(triton.cdiv(x.numel(), b),)](x, y, acc, x.numel(), BLOCK=b),
                                     warmup=25, rep=100, return_mode="median")
        rows.append({"what": f"stream x*dy BLOCK={block}", "ms": ms, "GB/s": 2 * x.numel() * 2 / ms / 1e6})
    names = ["conv_bwd_weight-direct-NHWGC_GKYXC_NHWGK-bf16-passthrough-p256_ch16_w4_sp256",
             "conv_bwd_weight-depthwise-NHWGC_GKYXC_NHWGK-bf16-passthrough-bw16_ch32_w4_sp256"]
    for filt, pad in (((3, 3), (1, 1)), ((1, 1), (0, 0)), ((1, 3), (0, 1)), ((3, 1), (1, 0))):
        p = ConvParams(2, 144, 128, 1, 1, filt, (56, 56), (1, 1), (1, 1), pad, pad)
        for name in names:
            ms, kern = time_instance(name, p)
            rows.append({"what": f"{name.split('-')[1]} {name.rsplit('-', 1)[1]} filter {filt}", "ms": ms,
                         "GB/s": p.bytes_moved("conv_bwd_weight", 2) / ms / 1e6, "kernels_ms": kern})
    with open(os.path.join(out, "depthwise_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(f"{r['what']:70s} {r['ms']:.4f} ms {r['GB/s']:.0f} GB/s {r.get('kernels_ms', '')}")


if __name__ == "__main__":
    main()
