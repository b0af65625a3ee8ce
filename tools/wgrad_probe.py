"""Few-channel / depthwise bwd-weight design probe (GPU only): time kernel variants beside cuDNN.

    python tools/wgrad_probe.py --out DIR                 # table of variants x problems, best per problem
    python tools/wgrad_probe.py --once PROBLEM INSTANCE   # one launch (to run under ncu)
    python tools/wgrad_probe.py --once-cudnn PROBLEM      # one cuDNN bwd-weight call (under ncu)

Variants are instance configs of the registered families, including configs outside configs/*.yaml
(the point is to learn where the design space should be), bound directly (no tuner): each is
verified against float64 once, then timed with do_bench (median) on random data; cuDNN
(benchmark mode, channels-last) in the same run. Writes wgrad_probe.json and wgrad_probe.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import triton.testing

from instance_factory.algorithms import ALGORITHMS, RunArgs
from instance_factory.dtypes import DATA_TYPES
from instance_factory.epilogue import resolve_fused_op
from instance_factory.factory import load_kernel_modules
from instance_factory.layouts import layout_for
from instance_factory.problem import ConvParams
from instance_factory.reference import ref_conv_bwd_weight, rel_error

PROBLEMS = {  # held-out layers (grouped_depthwise.yaml) plus MobileNetV2's worst depthwise layer
    "convnext_s1_7x7": ConvParams(2, 96, 64, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3)),
    "convnext_s3_7x7": ConvParams(2, 384, 64, 1, 1, (7, 7), (14, 14), (1, 1), (1, 1), (3, 3), (3, 3)),
    "effnet_b4_3x3_14": ConvParams(2, 480, 64, 1, 1, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1)),
    "effnet_b1_3x3_s2": ConvParams(2, 96, 64, 1, 1, (3, 3), (112, 112), (2, 2), (1, 1), (1, 1), (1, 1)),
    "mnv2_g144_56": ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
    "mnv3_g72_5x5_s2": ConvParams(2, 72, 64, 1, 1, (5, 5), (56, 56), (2, 2), (1, 1), (2, 2), (2, 2)),
    "regnet_g28_c8": ConvParams(2, 28, 64, 8, 8, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)),
    "resnext_g64_c4_56": ConvParams(2, 64, 64, 4, 4, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
}

# (family, config): dwstream around the YAML grid and past it; the session-5 winners for reference
VARIANTS = [
    ("dwstream", dict(block_t=0, block_w=4, block_ch=32, prefetch=0, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=4, block_ch=32, prefetch=1, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=8, block_ch=32, prefetch=0, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=8, block_ch=32, prefetch=1, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=8, block_ch=64, prefetch=0, num_warps=4, split=0)),
    ("dwstream", dict(block_t=16, block_w=8, block_ch=32, prefetch=1, num_warps=4, split=0)),
    ("dwstream", dict(block_t=16, block_w=16, block_ch=32, prefetch=0, num_warps=4, split=0)),
    ("dwstream", dict(block_t=8, block_w=16, block_ch=32, prefetch=1, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=16, block_ch=16, prefetch=0, num_warps=4, split=0)),
    ("dwstream", dict(block_t=0, block_w=8, block_ch=32, prefetch=0, num_warps=4, split=64)),
    ("depthwise", dict(block_w=16, block_ch=64, num_warps=4, split=0)),
    ("direct", dict(block_p=256, block_ch=16, num_warps=4, split=0)),
    ("blockdiag", dict(block_p=32, block_n=64, num_warps=4, split=64)),
]

LAYOUT = "nhwgc"
DTYPE = "bf16"
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter, a smoke test of this script
if DEV == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    PROBLEMS = {k: ConvParams(2, 8, 2, v.K, v.C, v.filter, (9, 9), v.stride, v.dilation, v.left_pad, v.right_pad)
                for k, v in list(PROBLEMS.items())[:3] + list(PROBLEMS.items())[-1:]}
    VARIANTS = VARIANTS[:2] + VARIANTS[-3:]


def _bench(fn) -> float:
    if DEV == "cpu":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _tensors(p: ConvParams, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lt = layout_for(LAYOUT, p.ndim)
    g = torch.Generator(device=DEV).manual_seed(seed)
    dt = DATA_TYPES[DTYPE].data
    x = torch.randn(lt.shape("input", p), device=DEV, generator=g).to(dt)
    dy = torch.randn(lt.shape("output", p), device=DEV, generator=g).to(dt)
    out = torch.empty(lt.shape("weight", p), device=DEV, dtype=dt)
    return x, dy, out


def _runner(fam: str, cfg: dict, p: ConvParams, x, dy, out):
    alg = ALGORITHMS[("conv_bwd_weight", fam)]
    lt, dt = layout_for(LAYOUT, p.ndim), DATA_TYPES[DTYPE]
    fused, user_fn = resolve_fused_op("passthrough", 0)
    why = alg.check_config(cfg) or alg.decline(cfg, p, lt, dt, fused)
    if why:
        return None, why
    args = RunArgs(params=p, layout=lt, dtype=dt, fused=fused, user_fn=user_fn, alpha=1.0, beta=0.0,
                   a=x, b=dy, ds=(), out=out, cfg=cfg)
    run = alg.bind(args)
    return (lambda: run(x, dy, out, (), 1.0, 0.0)), None


def _cudnn(p: ConvParams, x, dy):
    """torch's conv weight gradient on channels-last views of the same data (NHWGC = NHWC, G folded)."""
    N, G, C, K = p.N, p.G, p.C, p.K
    xi = x.reshape(N, *p.input, G * C).movedim(-1, 1)  # N, GC, H, W channels-last strides
    gy = dy.reshape(N, *p.output, G * K).movedim(-1, 1)
    wshape = (G * K, C, *p.filter)
    conv_w = {1: torch.ops.aten.convolution_backward, 2: torch.ops.aten.convolution_backward,
              3: torch.ops.aten.convolution_backward}[p.ndim]
    w = torch.empty(wshape, device=DEV, dtype=x.dtype)

    def go():
        return conv_w(gy, xi, w, None, list(p.stride), list(p.left_pad), list(p.dilation), False,
                      [0] * p.ndim, G, [False, True, False])[1]
    return go


def probe(out_dir: str) -> None:
    torch.backends.cudnn.benchmark = True
    load_kernel_modules()
    rows = []
    for pname, p in PROBLEMS.items():
        x, dy, out = _tensors(p)
        ref = ref_conv_bwd_weight(x, dy, p, layout_for(LAYOUT, p.ndim).name)
        mb = p.bytes_moved("conv_bwd_weight", 2) / 1e6
        cu = _cudnn(p, x, dy)
        cu()
        cu_ms = _bench(cu)
        rows.append(dict(problem=pname, variant="cudnn", ms=cu_ms, gbs=mb / cu_ms, err=None))
        for fam, cfg in VARIANTS:
            name = f"{fam} " + "_".join(f"{k}{v}" for k, v in cfg.items())
            go, why = _runner(fam, cfg, p, x, dy, out)
            if go is None:
                continue
            t0 = time.time()
            try:
                out.fill_(float("nan"))
                go()
                if DEV == "cuda":
                    torch.cuda.synchronize()
                err = rel_error(out, ref)
                ms = _bench(go)
            except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
                rows.append(dict(problem=pname, variant=name, ms=None, gbs=None, err=f"{type(e).__name__}: {e}"[:200]))
                continue
            rows.append(dict(problem=pname, variant=name, family=fam, cfg=cfg, ms=ms, gbs=mb / ms, err=err, speedup=cu_ms / ms,
                             compile_s=round(time.time() - t0, 1)))
            print(f"{pname:20s} {name:75s} {ms:8.4f} ms {mb / ms:6.0f} GB/s x{cu_ms / ms:5.2f} err {err:.1e}", flush=True)
    with open(os.path.join(out_dir, "wgrad_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = ["| problem | cuDNN ms | best variant | ms | GB/s | speedup | err |", "|---|---:|---|---:|---:|---:|---:|"]
    for pname in PROBLEMS:
        cu = next(r for r in rows if r["problem"] == pname and r["variant"] == "cudnn")
        ok = [r for r in rows if r["problem"] == pname and r["variant"] != "cudnn" and r["ms"] is not None
              and r["err"] is not None and r["err"] <= 1e-2]
        if ok:
            b = min(ok, key=lambda r: r["ms"])
            lines.append(f"| {pname} | {cu['ms']:.4f} | {b['variant']} | {b['ms']:.4f} | {b['gbs']:.0f} | "
                         f"{b['speedup']:.2f} | {b['err']:.1e} |")
    with open(os.path.join(out_dir, "wgrad_probe.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def once(pname: str, variant: str | None) -> None:
    load_kernel_modules()
    p = PROBLEMS[pname]
    x, dy, out = _tensors(p)
    if variant is None:
        torch.backends.cudnn.benchmark = False
        _cudnn(p, x, dy)()
    else:
        fam, _, cfgs = variant.partition(":")
        cfg = json.loads(cfgs)
        go, why = _runner(fam, cfg, p, x, dy, out)
        assert go is not None, why
        go()
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".")
    ap.add_argument("--once", nargs=2, metavar=("PROBLEM", "FAMILY:JSON_CFG"))
    ap.add_argument("--once-cudnn", metavar="PROBLEM")
    ns = ap.parse_args()
    if ns.once:
        once(ns.once[0], ns.once[1])
    elif ns.once_cudnn:
        once(ns.once_cudnn, None)
    else:
        probe(ns.out)


if __name__ == "__main__":
    main()
