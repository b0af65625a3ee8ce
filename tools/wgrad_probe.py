"""Kernel design probe (GPU; on a CPU a smoke test in the interpreter): time kernel variants beside cuDNN.

    python tools/wgrad_probe.py --out DIR                 # table of variants x problems, best per problem
    python tools/wgrad_probe.py --once PROBLEM INSTANCE   # one launch (to run under ncu)
    python tools/wgrad_probe.py --once-cudnn PROBLEM      # one cuDNN bwd-weight call (under ncu)
    python tools/wgrad_probe.py --op conv_bwd_data --variants V.json --problems r50_3x3_56,...  # dgrad

Built for bwd weight (few-channel, depthwise, dense); ``--op conv_bwd_data`` times bwd-data variants
of the same problems (the built-in variant list is wgrad's, so pass ``--variants``).

Variants are instance configs of the registered families, including configs outside configs/*.yaml
(the point is to learn where the design space should be), bound directly (no tuner): each is
verified against float64 once, then timed (median) on the tuner's own operands (harness); cuDNN
(harness.cudnn: benchmark mode, channels-last) in the same run. Writes wgrad_probe.json and wgrad_probe.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from instance_factory.algorithms import ALGORITHMS, RunArgs
from instance_factory.dtypes import DATA_TYPES
from instance_factory.epilogue import resolve_fused_op
from instance_factory.factory import load_kernel_modules
from instance_factory.harness.cudnn import time_torch, torch_conv_fn
from instance_factory.harness.operands import make_case
from instance_factory.harness.timing import time_cpu, time_gpu
from instance_factory.layouts import layout_for
from instance_factory.problem import ConvParams
from instance_factory.reference import rel_error
from instance_factory.tuning.problem_sets import Problem

PROBLEMS = {  # held-out layers (grouped_depthwise.yaml) plus MobileNetV2's worst depthwise layer
    "convnext_s1_7x7": ConvParams(2, 96, 64, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3)),
    "convnext_s3_7x7": ConvParams(2, 384, 64, 1, 1, (7, 7), (14, 14), (1, 1), (1, 1), (3, 3), (3, 3)),
    "convnext_s2_7x7": ConvParams(2, 192, 64, 1, 1, (7, 7), (28, 28), (1, 1), (1, 1), (3, 3), (3, 3)),
    "effnet_b5_5x5_14": ConvParams(2, 672, 64, 1, 1, (5, 5), (14, 14), (1, 1), (1, 1), (2, 2), (2, 2)),
    "effnet_b4_3x3_14": ConvParams(2, 480, 64, 1, 1, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1)),
    "effnet_b1_3x3_s2": ConvParams(2, 96, 64, 1, 1, (3, 3), (112, 112), (2, 2), (1, 1), (1, 1), (1, 1)),
    "mnv2_g144_56": ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
    "mnv3_g72_5x5_s2": ConvParams(2, 72, 64, 1, 1, (5, 5), (56, 56), (2, 2), (1, 1), (2, 2), (2, 2)),
    "regnet_g28_c8": ConvParams(2, 28, 64, 8, 8, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)),
    "resnext_g64_c4_56": ConvParams(2, 64, 64, 4, 4, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
    "resnext_g32_c8_56": ConvParams(2, 32, 64, 8, 8, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
    # dense (issue 12): ResNet-50 3x3 stages, a strided 1x1 downsample, a 1x1, the seed, U-Net 3D, 1D audio
    "r50_3x3_56": ConvParams(2, 1, 64, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)),
    "r50_3x3_28s2": ConvParams(2, 1, 64, 128, 128, (3, 3), (56, 56), (2, 2), (1, 1), (1, 1), (1, 1)),
    "r50_3x3_14": ConvParams(2, 1, 64, 256, 256, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1)),
    "r50_3x3_7": ConvParams(2, 1, 64, 512, 512, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1)),
    "r50_ds_1x1s2": ConvParams(2, 1, 64, 1024, 512, (1, 1), (28, 28), (2, 2), (1, 1), (0, 0), (0, 0)),
    "r50_1x1_56": ConvParams(2, 1, 64, 256, 64, (1, 1), (56, 56), (1, 1), (1, 1), (0, 0), (0, 0)),
    # dense 1x1 (session 23, the pointwise wgrad family): ResNet-50 and held-out networks' layers
    "r50_l3_expand": ConvParams(2, 1, 64, 1024, 256, (1, 1), (14, 14), (1, 1), (1, 1), (0, 0), (0, 0)),
    "r50_ds_l4_s2": ConvParams(2, 1, 64, 2048, 1024, (1, 1), (14, 14), (2, 2), (1, 1), (0, 0), (0, 0)),
    "mnv2_first_1x1": ConvParams(2, 1, 64, 16, 32, (1, 1), (112, 112), (1, 1), (1, 1), (0, 0), (0, 0)),
    # few-channel 1x1 layers (session 27): MobileNetV2 (in the shipped sets) and held-out networks
    # (EfficientNet-B0, MobileNetV3, ShuffleNetV2), memory-bound: dW is a few KiB, the reduction millions
    "mnv2_first_1x1_b128": ConvParams(2, 1, 128, 16, 32, (1, 1), (112, 112), (1, 1), (1, 1), (0, 0), (0, 0)),
    "mnv2_proj_32_144": ConvParams(2, 1, 64, 32, 144, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0)),
    "mnv2_exp_192_32": ConvParams(2, 1, 64, 192, 32, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0)),
    "mnv2_proj_64_192_b128": ConvParams(2, 1, 128, 64, 192, (1, 1), (14, 14), (1, 1), (1, 1), (0, 0), (0, 0)),
    "mnv2_proj_24_96": ConvParams(2, 1, 64, 24, 96, (1, 1), (56, 56), (1, 1), (1, 1), (0, 0), (0, 0)),
    "effb0_proj_24_144": ConvParams(2, 1, 64, 24, 144, (1, 1), (56, 56), (1, 1), (1, 1), (0, 0), (0, 0)),
    "mnv3_exp_64_16": ConvParams(2, 1, 64, 64, 16, (1, 1), (112, 112), (1, 1), (1, 1), (0, 0), (0, 0)),
    "shufflenet_24_24": ConvParams(2, 1, 128, 24, 24, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0)),
    "convnext_mlp_up": ConvParams(2, 1, 32, 384, 96, (1, 1), (56, 56), (1, 1), (1, 1), (0, 0), (0, 0)),
    "effnet_project": ConvParams(2, 1, 32, 40, 240, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0)),
    "resnext101_l4_1x1": ConvParams(2, 1, 32, 2048, 2048, (1, 1), (7, 7), (1, 1), (1, 1), (0, 0), (0, 0)),
    "seed_3x3_s2": ConvParams(2, 1, 128, 256, 128, (3, 3), (71, 71), (2, 2), (1, 1), (1, 1), (1, 1)),
    "unet3d_3x3x3": ConvParams(3, 1, 2, 64, 64, (3, 3, 3), (32, 64, 64), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    "audio_1d_k3": ConvParams(1, 1, 16, 512, 512, (3,), (4096,), (1,), (1,), (1,), (1,)),
    # stems: 3 input channels (ResNet-50 7x7 s2 at batch 64, R3D-18 3x7x7 at batch 32)
    "r50_stem_7x7": ConvParams(2, 1, 64, 64, 3, (7, 7), (224, 224), (2, 2), (1, 1), (3, 3), (3, 3)),
    "r3d_stem": ConvParams(3, 1, 32, 64, 3, (3, 7, 7), (16, 112, 112), (1, 2, 2), (1, 1, 1), (1, 3, 3), (1, 3, 3)),
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
    ("bdrow", dict(block_w=64, block_n=64, num_warps=4, num_stages=3, split=0)),
]

LAYOUT = "nhwgc"
DTYPE = "bf16"
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: the interpreter, a smoke test of this script
if DEV == "cpu":
    PROBLEMS = {k: ConvParams(2, 8, 2, v.K, v.C, v.filter, (9, 9), v.stride, v.dilation, v.left_pad, v.right_pad)
                for k, v in PROBLEMS.items() if k in (*list(PROBLEMS)[:3], "resnext_g64_c4_56", "r50_3x3_28s2")}
    VARIANTS = VARIANTS[:2] + VARIANTS[-3:]



def _case(p: ConvParams, op: str = "conv_bwd_weight"):
    """Operands and float64 reference from the tuner's own harness (same seeds, same tensors)."""
    prob = Problem(op, p, layout_for(LAYOUT, p.ndim).name, DTYPE)
    return make_case(prob, torch.device(DEV))


def _runner(fam: str, cfg: dict, case):
    """A bound runner of one variant on the case's operands, or (None, the decline reason)."""
    op = case.problem.op
    alg = ALGORITHMS[(op, fam)]
    p, dt = case.problem.params, DATA_TYPES[DTYPE]
    lt = layout_for(LAYOUT, p.ndim)
    fused, user_fn = resolve_fused_op("passthrough", 0)
    why = alg.check_config(cfg)  # the variant's values, checked before they become its config
    kcfg = alg.config.from_values(cfg) if why is None else None
    why = why or alg.decline(kcfg, p, lt, dt, fused)
    if why:
        return None, None, why
    out = torch.empty(case.ref.shape, device=DEV, dtype=dt.result or dt.data)
    args = RunArgs(params=p, layout=lt, dtype=dt, fused=fused, user_fn=user_fn, alpha=1.0, beta=0.0,
                   a=case.a, b=case.b, ds=(), out=out, cfg=kcfg)
    run = alg.bind(args)
    return (lambda: run(case.a, case.b, out, (), 1.0, 0.0)), out, None


def _ms(fn) -> float:
    return (time_gpu(fn, 25, 100) if DEV == "cuda" else time_cpu(fn, 1)).median_ms


def probe(out_dir: str, problems: list[str] | None = None, variants_file: str | None = None,
          tag: str = "", op: str = "conv_bwd_weight") -> None:
    """Every variant on every problem (or the named ones / the variants listed in a JSON file of
    [family, cfg] pairs), beside cuDNN; results in wgrad_probe{tag}.json / .md."""
    chosen = {k: PROBLEMS[k] for k in problems} if problems else PROBLEMS
    variants = VARIANTS
    if variants_file:
        with open(variants_file) as f:
            variants = [(fam, cfg) for fam, cfg in json.load(f)]
    os.makedirs(out_dir, exist_ok=True)
    load_kernel_modules()
    rows = []
    for pname, p in chosen.items():
        case = _case(p, op)
        mb = p.bytes_moved(op, 2) / 1e6
        cu_ms, _, cu_err = time_torch(case, 25, 100, 1)  # cuDNN, benchmark mode, channels-last
        rows.append(dict(problem=pname, variant="cudnn", ms=cu_ms, gbs=mb / cu_ms if cu_ms else None, err=cu_err or None))
        for fam, cfg in variants:
            name = f"{fam} " + "_".join(f"{k}{v}" for k, v in cfg.items())
            go, out, _ = _runner(fam, cfg, case)
            if go is None:
                continue
            t0 = time.time()
            try:
                out.fill_(float("nan"))
                go()
                err = rel_error(out, case.ref)
                ms = _ms(go)
            except Exception as e:  # noqa: BLE001 - a probe reports every failure and goes on
                rows.append(dict(problem=pname, variant=name, ms=None, gbs=None, err=f"{type(e).__name__}: {e}"[:200]))
                continue
            rows.append(dict(problem=pname, variant=name, family=fam, cfg=cfg, ms=ms, gbs=mb / ms, err=err,
                             speedup=cu_ms / ms if cu_ms else None, compile_s=round(time.time() - t0, 1)))
            print(f"{pname:20s} {name:75s} {ms:8.4f} ms {mb / ms:6.0f} GB/s err {err:.1e}", flush=True)
    with open(os.path.join(out_dir, f"wgrad_probe{tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = ["| problem | cuDNN ms | best variant | ms | GB/s | speedup | err |", "|---|---:|---|---:|---:|---:|---:|"]
    for pname in chosen:
        cu = next(r for r in rows if r["problem"] == pname and r["variant"] == "cudnn")
        ok = [r for r in rows if r["problem"] == pname and r.get("family") and r["err"] <= 1e-2]
        if ok and cu["ms"]:
            b = min(ok, key=lambda r: r["ms"])
            lines.append(f"| {pname} | {cu['ms']:.4f} | {b['variant']} | {b['ms']:.4f} | {b['gbs']:.0f} | "
                         f"{b['speedup']:.2f} | {b['err']:.1e} |")
    with open(os.path.join(out_dir, f"wgrad_probe{tag}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def once(pname: str, variant: str | None, op: str = "conv_bwd_weight") -> None:
    """One launch (under ncu): a variant ("family:{json cfg}"), or cuDNN when None."""
    load_kernel_modules()
    case = _case(PROBLEMS[pname], op)
    if variant is None:
        torch_conv_fn(case)[0]()
    else:
        fam, _, cfgs = variant.partition(":")
        go, _, why = _runner(fam, json.loads(cfgs), case)
        assert go is not None, why
        go()
    if DEV == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".")
    ap.add_argument("--once", nargs=2, metavar=("PROBLEM", "FAMILY:JSON_CFG"))
    ap.add_argument("--once-cudnn", metavar="PROBLEM")
    ap.add_argument("--problems", help="comma-separated problem names (default all)")
    ap.add_argument("--variants", help="JSON file of [family, cfg] pairs (default the built-in list)")
    ap.add_argument("--tag", default="", help="suffix of the output files")
    ap.add_argument("--op", default="conv_bwd_weight", choices=("conv_bwd_weight", "conv_bwd_data"))
    ns = ap.parse_args()
    if ns.once:
        once(ns.once[0], ns.once[1], ns.op)
    elif ns.once_cudnn:
        once(ns.once_cudnn, None, ns.op)
    else:
        probe(ns.out, ns.problems.split(",") if ns.problems else None, ns.variants, ns.tag, ns.op)


if __name__ == "__main__":
    main()
