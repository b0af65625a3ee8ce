"""Compile kernels for an NVIDIA target on a machine without a GPU: compile errors, registers, spills.

Triton's wheel carries ptxas, so a kernel can be built for sm_90 (Hopper) here: the
per-problem launch arguments are taken from a real ``bind`` on CPU tensors (the same constexprs and
integer arguments a GPU launch would pass), pointers typed by the tensors' dtypes. This catches what
the interpreter does not (layouts, tl.dot shapes, shared memory, register pressure) before any device
time is spent; it says nothing about speed.

    python tools/compile_check.py --pattern '*blockdiag*' --dtype bf16 --problem 2d-g64-n64-k4-c4-f3x3-i56x56-s1x1-d1x1-l1x1-r1x1
    python tools/compile_check.py --op conv_bwd_weight --pattern '*-tma-*' --dtype fp32_tf32 --operands --problem ...

Under a side venv with the device's Triton (``pip install triton==3.6.0 torch==2.13.0``), the code is what the
GPU machine would build.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "0")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

try:
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
except ImportError:  # an older Triton: no descriptor arguments to type
    TensorDescriptor = None

from instance_factory import fast_launch, ops  # noqa: E402
from instance_factory.dtypes import op_kwargs  # noqa: E402
from instance_factory.harness.operands import make_problem_tensors  # noqa: E402
from instance_factory.ops import prepare  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.registry import get_registry  # noqa: E402

_PTR_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int32: "*i32",
              torch.int64: "*i64", torch.uint8: "*u8"}


def _arg_type(v) -> str:
    if TensorDescriptor is not None and isinstance(v, TensorDescriptor):
        return f"tensordesc<{_PTR_TYPES[v.base.dtype][1:]}{list(v.block_shape)}>"
    if isinstance(v, torch.Tensor):
        return _PTR_TYPES[v.dtype]
    if isinstance(v, bool):
        return "i1"
    if isinstance(v, int):
        return "i64" if abs(v) >= 2**31 else "i32"
    if isinstance(v, float):
        return "fp32"
    raise TypeError(f"argument of type {type(v).__name__}")


def compile_launch(fn, args: tuple, constexprs: dict, target: GPUTarget):
    """Compile ``fn`` for ``target`` with the call's arguments, specialized as a launch would be
    (ints equal to 1 become constants; ints divisible by 16 and 16-byte aligned pointers carry
    tt.divisibility, which is what lets loads vectorize); returns the CompiledKernel."""
    signature, consts, attrs = {}, {}, {}
    it = iter(args)
    for i, name in enumerate(fn.arg_names):
        if fn.params[i].is_constexpr:
            signature[name] = "constexpr"
            consts[(i,)] = constexprs[name]
            continue
        v = next(it)
        if isinstance(v, int) and not isinstance(v, bool) and v == 1 and not fn.params[i].do_not_specialize:
            signature[name] = "constexpr"
            consts[(i,)] = 1
            continue
        signature[name] = _arg_type(v)
        aligned = v.data_ptr() % 16 == 0 if isinstance(v, torch.Tensor) else \
            isinstance(v, int) and not isinstance(v, bool) and v % 16 == 0
        if aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    opts = {k: constexprs[k] for k in ("num_warps", "num_stages") if k in constexprs}
    source = ASTSource
    if getattr(fn, "is_gluon", lambda: False)():  # a Gluon kernel (bdring) parses through Gluon's front end
        from triton.experimental.gluon._runtime import GluonASTSource as source
    return triton.compile(source(fn, signature, consts, attrs), target=target, options=opts)


def _cuobjdump(kernel, flag: str) -> str:
    """cuobjdump (the one Triton's wheel carries: no driver needed) run on the kernel's cubin."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([tool, flag, f.name], capture_output=True, text=True, check=True).stdout


def resource_usage(kernel) -> dict[str, int]:
    """Registers, stack (spills) and static shared memory of a compiled kernel, read from its cubin."""
    text = _cuobjdump(kernel, "--dump-resource-usage")
    return {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK|SHARED):(\d+)", text)}


def memory_ops(kernel) -> str:
    """Global loads / stores in the PTX by width, e.g. 'ld.v4.b32 x12, ld.b16 x40': scalar 2-byte
    accesses where 16-byte ones were meant show a lost vectorization."""
    ops = re.findall(r"\b(ld|st|cp\.async)\.(?:global|ca\.shared\.global|cg\.shared\.global)((?:\.[a-z0-9]+)*)(?:\s[^;]*?,\s*(0x[0-9a-f]+|\d+))?",
                     kernel.asm["ptx"])
    counts: dict[str, int] = {}
    for kind, mods, nbytes in ops:
        width = ".".join(m for m in mods.split(".") if m.startswith(("v", "b", "f", "u", "s")) and m[1:].isdigit())
        width = width or f"{int(nbytes, 0)}B"
        key = f"{kind}.{width}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


def operand_paths(kernel) -> dict[str, int]:
    """How the tensor-core operands reach the MMA, read from the TTGIR: wgmma (warp_group_dot) count and
    how many take A from registers; shared-memory round trips (a ``local_load`` of a landed tile whose
    registers go back through ``local_alloc``: Triton re-laying a tile, e.g. into tf32's K-major order);
    and 4-byte ``cp.async`` copies (element-wise transposes of pointer loads). Session 32 found the
    channels-last tf32 wgrad slowdown this way: 4-byte copies in igemm, a round trip per operand in tma."""
    ttgir = kernel.asm["ttgir"]
    dots = [ln for ln in ttgir.splitlines() if "ttng.warp_group_dot " in ln]
    return {"wgmma": len(dots),
            "wgmma_a_in_registers": sum("#ttg.dot_op<{opIdx = 0" in ln.split("*")[0] for ln in dots),
            "mma_v2": ttgir.count("tt.dot "),
            "local_load": len(re.findall(r"ttg\.local_load ", ttgir)),
            "local_alloc_from_registers": len(re.findall(r"ttg\.local_alloc %", ttgir)),
            "cp_async_4byte": len(re.findall(r"cp\.async\.ca\.shared\.global \[[^]]*\], \[[^]]*\], 0x4\b",
                                             kernel.asm["ptx"]))}


def dump_sass(kernel, stem: str, sass: str) -> None:
    """``stem``.sass (``sass``: cuobjdump --dump-sass of the cubin) and ``stem``.ptx: read the inner
    loop's instruction mix without a GPU."""
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".sass", "w") as f:
        f.write(sass)
    with open(stem + ".ptx", "w") as f:
        f.write(kernel.asm["ptx"])


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def inner_loops(sass: str) -> list[dict]:
    """The SASS loops (a backward branch and its target), innermost first by size: instruction count
    and the opcodes that matter for an issue-bound loop (HGMMA, integer division's IABS, IMAD,
    loads). This is how index math in a reduction loop shows up without a GPU."""
    insts = [(int(a, 16), op, rest) for a, _, op, rest in _SASS_LINE.findall(sass)]
    loops = []
    for src, op, rest in insts:
        target = re.search(r"0x([0-9a-f]+)", rest)
        if not op.startswith("BRA") or target is None or int(target.group(1), 16) >= src:
            continue
        dst = int(target.group(1), 16)
        mix: dict[str, int] = {}
        for addr, o, _ in insts:
            if dst <= addr <= src:
                mix[o.split(".")[0]] = mix.get(o.split(".")[0], 0) + 1
        loops.append({"start": dst, "end": src, "instructions": sum(mix.values()), "mix": mix})
    return sorted(loops, key=lambda lp: lp["instructions"])


#: the opcodes that do a kernel's arithmetic: their share of a loop is the part of its issue slots
#: spent on the math (session 24: dwroll's W-tap loop 56 of 169, dwtaps' row step 392 of 719)
MATH_OPS = ("FFMA", "HFMA2", "HGMMA", "HMMA", "FFMA2")


def _loop_summary(sass: str) -> str:
    keep = ("FFMA", "HGMMA", "UTMALDG", "LDSM", "BAR", "IABS", "IMAD", "IADD3", "ISETP", "LDG", "LDGSTS", "LOP3", "SEL",
            "SHF", "PRMT", "LEA", "CS2R", "MOV", "I2F", "F2I")
    out = []
    for lp in inner_loops(sass):
        mix = " ".join(f"{k}:{lp['mix'][k]}" for k in keep if k in lp["mix"])
        math_share = sum(lp["mix"].get(k, 0) for k in MATH_OPS) / max(1, lp["instructions"])
        out.append(f"    loop {lp['start']:#06x}-{lp['end']:#06x}: {lp['instructions']} instr, math {math_share:.0%}  {mix}")
    return "\n".join(out)


class _Recorder:
    """Stands in for BoundKernel: records (kernel, args, constexprs) instead of launching."""

    calls: list = []

    def __init__(self, fn, grid, **constexprs):
        self.fn, self.grid, self.constexprs = fn, grid, constexprs

    def __call__(self, *args):
        _Recorder.calls.append((self.fn, args, self.constexprs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pattern", default="*", help="instance name glob")
    ap.add_argument("--op", default="conv_bwd_data,conv_bwd_weight")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--layout", default="NHWGC/GKYXC/NHWGK")
    ap.add_argument("--problem", required=True, help="ConvParams key")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--sass", metavar="DIR", help="also write each kernel's SASS (cuobjdump) and PTX here")
    ap.add_argument("--loops", action="store_true", help="print each SASS loop's size and instruction mix")
    ap.add_argument("--operands", action="store_true", help="print how the MMA operands arrive (operand_paths)")
    ap.add_argument("--full-errors", action="store_true", help="print whole compile errors (default: 300 characters)")
    ns = ap.parse_args(argv)
    target = GPUTarget("cuda", ns.arch, 32)
    p = ConvParams.from_key(ns.problem)
    failures = 0
    ops._check_device = lambda tensors: torch.device("cpu")  # CPU tensors stand in for the GPU's here
    for op in ns.op.split(","):
        runnable, _ = get_registry().candidates(op, p, ns.layout, ns.dtype, "passthrough")
        for inst in [i for i in runnable if fnmatch.fnmatch(i.name, ns.pattern)]:
            t = make_problem_tensors(op, p, ns.layout, ns.dtype, 0, "cpu", random=False)
            _, args = prepare(op, t["a"], t["b"], p, layout=ns.layout, instance=inst, **op_kwargs(ns.dtype))
            _Recorder.calls = []
            saved = fast_launch.BoundKernel
            # every kernel module that binds launches: the bind's own and the shared helpers it calls
            # (common's runners, bwd_weight_igemm's slice_reduce), without a list to keep in step with them
            patched = [m for name, m in list(sys.modules.items())
                       if name.startswith("instance_factory.kernels.") and getattr(m, "BoundKernel", None) is saved]
            try:
                for mod in patched:
                    mod.BoundKernel = _Recorder
                inst.alg.bind(args)(args.a, args.b, args.out, args.ds, 1.0, 1.0)
            finally:
                for mod in patched:
                    mod.BoundKernel = saved
            for fn, call_args, constexprs in _Recorder.calls:
                try:
                    k = compile_launch(fn, call_args, constexprs, target)
                    use = resource_usage(k)
                    sass = _cuobjdump(k, "--dump-sass") if ns.sass or ns.loops else ""
                    if ns.sass:
                        dump_sass(k, os.path.join(ns.sass, f"{inst.name}.{fn.__name__}"), sass)
                    print(f"{inst.name:90s} {fn.__name__:22s} regs {use.get('reg', -1):4d} "
                          f"stack {use.get('stack', -1):4d} smem {k.metadata.shared:6d}  {memory_ops(k)}")
                    if ns.loops:
                        print(_loop_summary(sass))
                    if ns.operands:
                        print("    operands: " + ", ".join(f"{k} {v}" for k, v in operand_paths(k).items()))
                except Exception as exc:  # report and go on: the point is the list of failures
                    failures += 1
                    text = str(exc) if ns.full_errors else str(exc)[:300]
                    if ns.full_errors and exc.__cause__ is not None:  # an error inside a called jit function
                        text += f"\n  caused by {type(exc.__cause__).__name__}: {exc.__cause__}"
                    print(f"{inst.name:90s} {fn.__name__:24s} FAILED {type(exc).__name__}: {text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
