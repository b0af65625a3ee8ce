"""tools/compile_check.py: kernels built for sm_90 on a machine without a GPU (Triton's wheel carries
ptxas), and its report of how the MMA operands arrive (session 32's diagnosis of tf32 wgrad). Run as a
subprocess: the kernels must be imported outside the interpreter."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import triton

ROOT = Path(__file__).resolve().parent.parent
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
pytestmark = pytest.mark.skipif(not PTXAS.exists() and not shutil.which("ptxas"),
                                reason="no ptxas: this Triton cannot build for NVIDIA targets")


def test_tf32_wgrad_operands_take_the_three_bf16_products():
    """tma wgrad in fp32_tf32: three wgmma per step (kernels/common.dot_tn's hi/lo products), A from
    registers, no element-wise 4-byte copies; the report line names each count."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_check.py"), "--op", "conv_bwd_weight", "--dtype", "fp32_tf32",
         "--operands", "--pattern", "*-tma-*m128_n128_k32_gm8_w8_s3_rows1_skauto",
         "--problem", "2d-g1-n8-k128-c128-f3x3-i28x28-s1x1-d1x1-l1x1-r1x1"],
        capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    gemm = run.stdout.split("_bwd_weight_tma_kernel")[1].split("\n")[1]
    assert "wgmma 3, wgmma_a_in_registers 3" in gemm and "cp_async_4byte 0" in gemm, gemm
