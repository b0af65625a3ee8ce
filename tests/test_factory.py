"""YAML expansion, validation errors and the registry's queries."""

import dataclasses
import textwrap

import pytest
import triton
import triton.language as tl

from instance_factory.algorithms import ALGORITHMS, Algorithm, register_algorithm
from instance_factory.factory import ConfigError, expand_file
from instance_factory.kernel_config import KernelConfig
from instance_factory.problem import ConvParams
from instance_factory.registry import Registry, get_registry


@dataclasses.dataclass(frozen=True)
class FakeConfig(KernelConfig):
    block: int
    num_warps: int

    def check(self):
        if self.block & (self.block - 1):
            return f"block={self.block} is not a power of two"
        return None


@triton.jit
def _fake_kernel(ptr):  # the fake family's kernel identity (never launched)
    tl.store(ptr, 0)


def _decline(cfg, params, layout, dtype, fused):
    return "needs C >= block/16" if params.C * 16 < cfg.block else None


@pytest.fixture(scope="module", autouse=True)
def fake_family():
    alg = register_algorithm(Algorithm(op="conv_bwd_data", name="fake_test", config=FakeConfig, decline=_decline,
                                       bind=lambda args: None, description="test family", kernels=(_fake_kernel,)))
    yield alg
    ALGORITHMS.pop(("conv_bwd_data", "fake_test"))


GOOD = """
op: conv_bwd_data
support:
  - layouts: [nhwgc, gnhwc]
    ndims: [2]
    dtypes: [fp16]
    fused_ops: [passthrough, add]
families:
  - algorithm: fake_test
    params:
      block: [16, 32, 64]
      num_warps: [4, 8]
    constraints:
      - num_warps == 4 or block >= 32
"""


def _write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_expansion_is_filtered_product_with_logged_culls(tmp_path):
    exp = expand_file(_write(tmp_path, GOOD))
    # 3 blocks x 2 warps - 1 culled = 5 configs, x 2 layouts x 2 fused ops
    assert len(exp.instances) == 5 * 4
    assert len(exp.culled) == 1 and "num_warps == 4 or block >= 32" in exp.culled[0].reason
    assert ("conv_bwd_data", "gnhwc", "fp16", 2, "add") in exp.declared
    names = {i.name for i in exp.instances}
    assert "conv_bwd_data-fake_test-NHWGC_GKYXC_NHWGK-fp16-passthrough-block32_w8" in names


def test_registry_queries_and_decline_reasons(tmp_path):
    _write(tmp_path, GOOD)
    reg = Registry.from_dir(tmp_path)
    assert len(reg.instances(layout="NHWGC/GKYXC/NHWGK", fused_op="add")) == 5
    assert len(reg.instances(pattern="*block64*")) == 8
    inst = reg.get("conv_bwd_data-fake_test-NHWGC_GKYXC_NHWGK-fp16-passthrough-block64_w4")
    assert inst.cfg == {"block": 64, "num_warps": 4}  # the plain dict (database rows, the CLI)
    assert inst.kernel_config == FakeConfig(block=64, num_warps=4)  # what bind and decline read
    with pytest.raises(KeyError, match="no instance named"):
        reg.get("nope")
    p = ConvParams(2, 1, 1, 1, 2, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    ok, declined = reg.candidates("conv_bwd_data", p, "NHWGC/GKYXC/NHWGK", "fp16", "passthrough")
    assert {i.cfg["block"] for i in ok} == {16, 32}
    assert declined and all(r == "needs C >= block/16" for _, r in declined)
    assert inst.decline(p, "NGCHW/GKYXC/NGKHW").startswith("instance is for layout")
    assert reg.counts()[("conv_bwd_data", "nhwgc", "fp16", 2, "add")] == 5


def test_a_constraint_on_elem_bytes_culls_configs_for_those_data_types_only(tmp_path):
    """``elem_bytes`` (4 for fp32 / fp32_tf32, 2 for fp16 / bf16) lets a tile suit one data width: the
    config is culled for the other dtypes, once per (config, dtype), with the dtype in the reason."""
    text = (GOOD.replace("dtypes: [fp16]", "dtypes: [fp16, fp32_tf32]")
            .replace("      - num_warps == 4 or block >= 32", "      - block >= 32 or elem_bytes == 4"))
    exp = expand_file(_write(tmp_path, text))
    blocks = {(i.dtype, i.cfg["block"]) for i in exp.instances}
    assert blocks == {("fp16", 32), ("fp16", 64), ("fp32_tf32", 16), ("fp32_tf32", 32), ("fp32_tf32", 64)}
    assert len(exp.instances) == (2 * 2 + 3 * 2) * 2 * 2  # (fp16 + tf32 configs) x 2 layouts x 2 fused ops
    culled = [c for c in exp.culled if c.dtype]
    assert len(culled) == 2 and {c.dtype for c in culled} == {"fp16"}  # block16 x w4, w8
    assert "'block >= 32 or elem_bytes == 4' is false for fp16 (elem_bytes=2)" in culled[0].reason
    assert ("conv_bwd_data", "nhwgc", "fp16", 2, "add") in exp.declared


def test_the_shipped_tma_bwd_data_family_has_k32_tiles_for_4_byte_data_only():
    reg = get_registry()
    ks = {(i.dtype, i.cfg["block_k"]) for i in reg.instances(op="conv_bwd_data") if i.algorithm == "tma"}
    assert ks == {("fp32", 32), ("fp32", 64), ("fp32_tf32", 32), ("fp32_tf32", 64), ("fp16", 64), ("bf16", 64)}


@pytest.mark.parametrize("text, where, problem", [
    ("op: conv_bwd_data\nsupport: []\nfamilies: []\nextra: 1\n", "file", "unknown key(s) ['extra']"),
    (GOOD.replace("num_warps: [4, 8]", "num_warps: [4, 8]\n      colour: [1]"), "families[0] (fake_test)",
     "unknown parameter(s) ['colour']"),
    (GOOD.replace("block: [16, 32, 64]", "block: [16, '32x']"), "params.block", "has type str"),
    (GOOD.replace("block: [16, 32, 64]", "block: [16, 48]"), "params.block",
     "value 48 survives in no config (impossible tile): block=48 is not a power of two"),
    (GOOD.replace("num_warps == 4 or block >= 32", "block >= 999"), "families[0] (fake_test)",
     "expansion is empty"),
    (GOOD.replace("block >= 32", "__import__('os')"), "constraints", "uses Call"),
    (GOOD.replace("block >= 32", "blok >= 32"), "constraints", "names 'blok'"),
    (GOOD.replace("[passthrough, add]", "[passthrough, mul]"), "support[0].fused_ops", "unknown value 'mul'"),
    (GOOD.replace("ndims: [2]", "ndims: 2"), "support[0].ndims", "must be a non-empty list"),
    (GOOD.replace("fake_test", "nonexistent"), "families[0]", "is not a kernel family"),
    ("op: [unclosed\n", "file", "not valid YAML"),
])
def test_bad_config_errors_name_file_entry_and_problem(tmp_path, text, where, problem):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        expand_file(path)
    msg = str(info.value)
    assert str(path) in msg and where in msg and problem in msg, msg


def test_kernel_config_is_frozen_typed_and_reads_like_its_dict():
    cfg = FakeConfig.from_values({"block": 16, "num_warps": 4, "not_a_parameter": 1})
    assert (cfg.block, cfg.num_warps) == (16, 4) and FakeConfig.param_names() == ("block", "num_warps")
    assert cfg["block"] == 16 and "num_warps" in cfg and "x" not in cfg and cfg.get("x", 7) == 7
    assert dict(cfg) == cfg.as_dict() == {"block": 16, "num_warps": 4} and list(cfg.keys()) == ["block", "num_warps"]
    assert cfg.replace(block=32) == FakeConfig(32, 4) and cfg.block == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.block = 8
    with pytest.raises(KeyError):
        cfg["x"]
    assert FakeConfig.validate({"block": 16}) == "config lacks num_warps"
    assert FakeConfig.validate({"block": 24, "num_warps": 4}) == "block=24 is not a power of two"
    assert FakeConfig.validate(cfg) is None and ALGORITHMS[("conv_bwd_data", "fake_test")].check_config(cfg) is None


def test_algorithm_takes_its_parameters_and_checks_from_its_config_class():
    alg = ALGORITHMS[("conv_bwd_data", "fake_test")]
    assert alg.param_names == ("block", "num_warps") and alg.check_config == FakeConfig.validate
    assert alg.check_config({"block": 24, "num_warps": 4}) == "block=24 is not a power of two"
    with pytest.raises(TypeError, match="config must be a KernelConfig subclass"):
        Algorithm(op="conv_bwd_data", name="dict_test", config=dict, decline=_decline, bind=lambda args: None)
    # dataclasses.replace (tests patch bind this way) keeps the config and what follows from it
    again = dataclasses.replace(alg, bind=lambda args: None)
    assert (again.config, again.param_names, again.check_config) == (alg.config, alg.param_names, alg.check_config)


def test_run_args_take_a_config_not_a_dict():
    from instance_factory.algorithms import RunArgs

    with pytest.raises(TypeError, match="alg.config.from_values"):
        RunArgs(*[None] * 11, cfg={"block": 16})


def test_every_kernel_has_a_typed_frozen_config():
    import typing

    get_registry()  # loads every kernel module
    shipped = [key for key, alg in ALGORITHMS.items() if alg.config.__module__.startswith("instance_factory.")]
    assert len(shipped) == 36 and {a for _, a in shipped} == {"igemm", "splitk_atomic", "splitk_reduce", "two_stage", "padx",
                                                               "padvec",
                                                               "direct", "depthwise", "dwstream", "dwslide", "dwslab", "dwplane",
                                                               "dwroll", "dwtaps", "dwtile",
                                                               "blockdiag", "bdtap", "bdroll", "bdrow", "bdwin", "bdring", "bdstride", "tma", "pointwise", "shift", "rowstack", "tapshare",
                                                               "relayout",
                                                               "cfirst"}
    for key in shipped:
        config = ALGORITHMS[key].config
        assert issubclass(config, KernelConfig) and config.__dataclass_params__.frozen, key
        hints = typing.get_type_hints(config)
        assert all(hints[n] in (int, str) for n in config.param_names()), (key, hints)


def test_shipped_configs_expand_and_cover_the_contract():
    reg = get_registry()
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        for fam in ("nhwgc", "gnhwc", "ngchw", "ngchw_kcyx"):
            for nd in (1, 2, 3):
                for dt in ("fp32", "fp32_tf32", "fp16", "bf16"):
                    for fo in ("passthrough", "scale", "bilinear", "custom"):
                        assert reg.is_declared(op, fam, dt, nd, fo), (op, fam, dt, nd, fo)
                        assert reg.instances(op=op, layout=fam, dtype=dt, ndim=nd, fused_op=fo)
    assert reg.is_declared("conv_bwd_weight", "nhwgc", "bf16_fp32w", 3, "bilinear")
    assert reg.is_declared("conv_bwd_data", "nhwgc", "fp16", 2, "add_relu")
    assert not reg.is_declared("conv_bwd_data", "nhwgc", "bf16_fp32w", 2, "passthrough")
    algs = {i.algorithm for i in reg.instances(op="conv_bwd_weight")}
    assert {"igemm", "splitk_atomic", "splitk_reduce", "two_stage", "direct"} <= algs


def test_kernel_hash_covers_the_kernels_a_family_launches_and_what_they_call():
    """A family's hash follows the jit kernels it launches and every jit function they call (the
    epilogue, shared helpers, direct's reduce kernel for depthwise), not host code nor the other
    kernels of its module."""
    from instance_factory.algorithms import ALGORITHMS
    from instance_factory.kernel_identity import jit_closure

    get_registry()

    def names(op, alg):
        return sorted(q.rsplit(".", 1)[1] for q in jit_closure(ALGORITHMS[(op, alg)].kernels)[0])

    assert names("conv_bwd_weight", "depthwise") == [
        "_depthwise_wgrad_kernel", "_dw_finalize_kernel", "_load_d", "_tap_of", "apply_epilogue"]
    assert names("conv_bwd_data", "direct") == ["_dx_direct_kernel", "_load_d", "apply_epilogue"]
    insts = [i for i in get_registry().instances(op="conv_bwd_weight") if i.algorithm == "depthwise"][:2]
    assert len(insts) == 2 and insts[0].kernel_hash != insts[1].kernel_hash  # the config is part of it


_KERNEL_MODULE = """
import triton
import triton.language as tl

SCALE = {scale}


@triton.jit
def _helper(x):
    return x * SCALE{helper_extra}


@triton.jit
def kernel(ptr):
    \"\"\"{doc}\"\"\"
    # {comment}
    tl.store(ptr, _helper(tl.load(ptr)))


def launch(t):
    return {host}
"""


def _hash_of_module(tmp_path, name, **fields):
    import importlib.util

    from instance_factory.kernel_identity import kernel_code_hash

    values = dict(scale=2, helper_extra="", doc="notes", comment="why", host="t")
    values.update(fields)
    (tmp_path / name).mkdir()
    path = tmp_path / name / "kmod.py"
    path.write_text(_KERNEL_MODULE.format(**values))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return kernel_code_hash([mod.kernel])


def test_kernel_hash_follows_kernel_code_not_notes_or_host_code(tmp_path):
    base = _hash_of_module(tmp_path, "k_base")
    assert _hash_of_module(tmp_path, "k_notes", doc="other notes", comment="another why") == base
    assert _hash_of_module(tmp_path, "k_host", host="t + 1") == base  # a launcher edit keeps the rows
    assert _hash_of_module(tmp_path, "k_helper", helper_extra=" + 1") != base  # a called helper counts
    assert _hash_of_module(tmp_path, "k_const", scale=3) != base  # so does a constant a kernel reads
    # (each variant is its own module: the module a kernel lives in is not part of the hash)


def test_kernel_hash_is_the_same_compiled_and_interpreted():
    """The GPU machines hash JITFunctions, CPU machines the interpreter's wrappers: same code, same hash."""
    import os
    import subprocess
    import sys

    code = ("from instance_factory.registry import get_registry; import hashlib; "
            "print(hashlib.sha256(''.join(sorted({i.kernel_hash for i in get_registry().instances()})).encode())"
            ".hexdigest())")
    outs = {mode: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 env={**os.environ, "TRITON_INTERPRET": mode}).stdout for mode in ("0", "1")}
    assert outs["0"] == outs["1"] and len(outs["0"]) > 60


def test_relayout_hash_does_not_depend_on_families_registered_from_outside():
    """relayout's kernel set (hence its hash and its rows) holds this package's kernels only: a family
    registered elsewhere before the kernels load (this module's fake one, a user's plug-in) stays out."""
    from instance_factory.kernels import relayout

    get_registry()
    assert not relayout._package_kernel(_fake_kernel)
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        kernels = ALGORITHMS[(op, "relayout")].kernels
        assert kernels and all(relayout._package_kernel(k) for k in kernels)
