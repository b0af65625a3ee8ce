"""tools/rekey_kernel_hashes.py: ``apply --only`` re-keys only the rows whose launch ran unchanged code."""

import csv
import importlib.util
import io
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("rekey_kernel_hashes", ROOT / "tools" / "rekey_kernel_hashes.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

HEAD = ["instance", "kernel_hash", "op", "algorithm", "instance_params", "layout", "device_sms", "ndim", "G",
        "N", "K", "C", "filter", "input", "stride", "dilation", "left_pad", "right_pad"]
# ShuffleNetV2's one-tile 24x24 layer (N 128, 28x28) and a 1x1 layer of many tiles
ONE_TILE = ["2", "1", "128", "24", "24", "1x1", "28x28", "1x1", "1x1", "0x0", "0x0"]
MANY_TILES = ["2", "1", "64", "2048", "256", "1x1", "14x14", "1x1", "1x1", "0x0", "0x0"]
CFG = {"block_k": 256, "block_m": 64, "block_n": 32, "group_m": 8, "num_stages": 4, "num_warps": 4}


def _row(name, alg, cfg, shape, op="conv_bwd_weight"):
    return [name, "old", op, alg, json.dumps(cfg), "NHWGC/GKYXC/NHWGK", "132", *shape]


def _text(rows):
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([HEAD, *rows])
    return out.getvalue()


def test_only_rekeys_the_rows_whose_launch_ran_unchanged_code():
    rows = [
        _row("last", "pointwise", dict(CFG, split_k=0, reduce="last"), ONE_TILE),  # no reduce pass
        _row("block", "pointwise", dict(CFG, split_k=0, reduce="pass"), ONE_TILE),  # one-row programs, slab blocks
        _row("one_slab", "pointwise", dict(CFG, block_m=128, block_n=128, block_k=64, split_k=4, reduce="pass"),
             MANY_TILES),  # 32 tiles x 8 programs of full rows fill 132 SMs: one slab a step
        _row("relayout", "relayout", {"inner": "lookup"}, ["2", "1", "8", "16", "16", "3x3", "8x8", "1x1", "1x1",
                                                          "1x1", "1x1"]),
    ]
    assert [tool._pointwise_reduce(dict(zip(HEAD, r))) for r in rows] == ["none", "block", "one_slab", ""]
    mapping = {r[0]: ("old", "new") for r in rows}
    for only, moved in (("pointwise_reduce_none", {"last"}), ("pointwise_reduce_one_slab", {"one_slab"}),
                        ("pointwise_reduce_block,relayout_without_pointwise", {"block", "relayout"})):
        text, changed, kept = tool._rekey_csv(_text(rows), mapping, tool._any_of(only))
        got = {r[0] for r in list(csv.reader(io.StringIO(text)))[1:] if r[1] == "new"}
        assert got == moved and (changed, kept) == (len(moved), len(rows) - len(moved))


def test_evidence_lines_are_rekeyed_only_where_the_check_can_judge_them():
    """Session 32's dot_tn: a 16-bit evidence line of a TMA wgrad family ran unchanged code (re-keyed), a
    tf32 one did not (stale); a check that needs the launch plan leaves every evidence line stale."""
    lines = [{"op": "conv_bwd_weight", "dtype": dt, "kernel_hash": "old",
              "instance": f"conv_bwd_weight-{alg}-NHWGC_GKYXC_NHWGK-{dt}-passthrough-m64_n64"}
             for alg, dt in (("tma", "fp16"), ("shift", "bf16_fp32w"), ("tma", "fp32_tf32"), ("igemm", "fp16"))]
    text = "\n".join(json.dumps(r) for r in lines) + "\n"
    mapping = {r["instance"]: ("old", "new") for r in lines}
    out, changed, kept = tool._rekey_jsonl(text, mapping, tool._any_of("wgrad_tma_16bit"))
    assert [json.loads(x)["kernel_hash"] for x in out.splitlines()] == ["new", "new", "old", "old"]
    assert (changed, kept) == (2, 2)
    out, changed, _ = tool._rekey_jsonl(text, mapping, tool._any_of("pointwise_reduce_none"))
    assert changed == 0 and out == text
