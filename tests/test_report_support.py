"""Helpers shared by the report tests (no tests here): a fake registry from a tmp config folder and
synthetic evidence files / tuning databases. Interpreter-free: the fake kernel family never launches."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import triton
import triton.language as tl

from instance_factory.algorithms import ALGORITHMS, Algorithm, register_algorithm
from instance_factory.kernel_config import KernelConfig
from instance_factory.registry import Registry

FAKE = "fake_report"


def _launch(args):  # never called: the report only reads the registry
    raise AssertionError("the report must not launch kernels")


@dataclasses.dataclass(frozen=True)
class FakeReportConfig(KernelConfig):
    block: int


@triton.jit
def _fake_kernel(ptr):  # the fake family's kernel identity (never launched)
    tl.store(ptr, 0)


def register_fake() -> list[tuple[str, str]]:
    keys = []
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        if (op, FAKE) not in ALGORITHMS:
            register_algorithm(Algorithm(op, FAKE, FakeReportConfig, lambda cfg, p, lt, dt, fo: None, _launch,
                                         "report test family", kernels=(_fake_kernel,)))
        keys.append((op, FAKE))
    return keys


def unregister_fake() -> None:
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        ALGORITHMS.pop((op, FAKE), None)


def config_text(op: str, layouts=("nhwgc",), ndims=(2,), dtypes=("fp16",), fused=("passthrough", "bilinear"),
                blocks=(16, 32)) -> str:
    return textwrap.dedent(f"""
        op: {op}
        support:
          - layouts: [{", ".join(layouts)}]
            ndims: [{", ".join(map(str, ndims))}]
            dtypes: [{", ".join(dtypes)}]
            fused_ops: [{", ".join(fused)}]
        families:
          - algorithm: {FAKE}
            params:
              block: [{", ".join(map(str, blocks))}]
        """)


def make_registry(tmp: Path, data: dict | None = None, weight: dict | None = None) -> Registry:
    """A Registry from tmp/configs with one fake family per op (``None``: that op gets defaults)."""
    d = tmp / "configs"
    d.mkdir(parents=True, exist_ok=True)
    for p in d.glob("*.yaml"):
        p.unlink()
    (d / "data.yaml").write_text(config_text("conv_bwd_data", **(data or {})))
    (d / "weight.yaml").write_text(config_text("conv_bwd_weight", **(weight or {})))
    return Registry.from_dir(d)


PROBLEM_2D = "2d-g1-n2-k8-c8-f3x3-i6x6-s1x1-d1x1-l1x1-r1x1"
PROBLEM_3D = "3d-g1-n1-k8-c8-f3x3x3-i4x4x4-s1x1x1-d1x1x1-l1x1x1-r1x1x1"


def inst_name(op="conv_bwd_data", layout="NHWGC_GKYXC_NHWGK", dtype="fp16", fused="passthrough", block=16) -> str:
    return f"{op}-{FAKE}-{layout}-{dtype}-{fused}-block{block}"


def ev_row(reg: Registry | None, instance: str, *, op="conv_bwd_data", layout="NHWGC/GKYXC/NHWGK", dtype="fp16",
           fused="passthrough", problem=PROBLEM_2D, status="PASS", error=1e-4, kernel_hash: str | None = "current",
           **extra) -> dict:
    row = {"case": f"test {op}", "op": op, "problem": problem, "layout": layout, "dtype": dtype, "fused_op": fused,
           "instance": instance, "error": error, "tol": 2e-3, "status": status}
    if kernel_hash == "current" and reg is not None:
        row["kernel_hash"] = reg.get(instance).kernel_hash
    elif kernel_hash not in (None, "current"):
        row["kernel_hash"] = kernel_hash
    row.update(extra)
    return row


def write_jsonl(path: Path, meta: dict | None, rows: list, raw_lines: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(meta)] if meta is not None else []
    lines += [json.dumps(r) for r in rows]
    lines += raw_lines or []
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return path


INTERP_META = {"device": "cpu (Triton interpreter)", "backend": "interpreter", "torch": "2.13", "triton": "3.9",
               "date": "2026-01-02 03:04:05"}
GPU_META = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11", "triton": "3.6", "sm_count": 132,
            "date": "2026-01-05 10:00:00"}


def tuning_row(reg: Registry, instance: str, problem: str, median_ms: float, cudnn_ms: float | None,
               device: str = "NVIDIA H100 80GB HBM3", kernel_hash: str | None = None, status: str = "ok") -> dict:
    from instance_factory.problem import ConvParams
    from instance_factory.tuning.database import problem_fields

    inst = reg.get(instance)
    p = ConvParams.from_key(problem)
    row = problem_fields(inst.op, p, inst.layout.name, inst.dtype, inst.fused_op)
    row.update(instance=inst.name, algorithm=inst.algorithm, instance_params=json.dumps(inst.cfg),
               kernel_hash=kernel_hash or inst.kernel_hash, device=device, device_cc="9.0", device_sms=132,
               triton_version="3.6", torch_version="2.11", package_version="0.1.0", status=status,
               median_ms=median_ms if status == "ok" else None, reps=10,
               tflops=p.flops() / (median_ms * 1e-3) / 1e12, cudnn_ms=cudnn_ms,
               speedup=(cudnn_ms / median_ms) if cudnn_ms else None, timestamp="2026-01-05T10:00:00Z")
    if status == "ok":  # an ok row is a verified one
        from instance_factory.dtypes import DATA_TYPES

        tol = DATA_TYPES[inst.dtype].tolerance
        row.update(rel_err=tol / 10, max_rel_err=tol / 5, tolerance=tol)
    return row


def write_db(dirpath: Path, rows: list[dict], name: str = "nvidia-h100-80gb-hbm3.csv") -> Path:
    from instance_factory.tuning.database import TuningDB

    dirpath.mkdir(parents=True, exist_ok=True)
    TuningDB(dirpath / name).add(rows)
    return dirpath / name
