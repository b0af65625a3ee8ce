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


def test_dwplane_row_blocks_and_bdwin_group_major_stay_stale():
    """Session 39: a dwplane wgrad row or evidence line whose launch now cuts blocks of whole rows (a 28x28 plane
    at j=32) stays stale, one on column blocks (60x60) is re-keyed; bdwin's group-major rows stay stale."""
    dw = {"block_m": 32, "j": 32, "prefetch": 0, "num_warps": 4, "num_stages": 1, "split": 0}
    name = "conv_bwd_weight-dwplane-NGCHW_GKYXC_NGKHW-bf16-passthrough-m32_j32_pf0_w4_s1_spauto"
    small = ["2", "192", "8", "1", "1", "7x7", "28x28", "1x1", "1x1", "3x3", "3x3"]
    large = ["2", "96", "8", "1", "1", "7x7", "60x60", "1x1", "1x1", "3x3", "3x3"]
    rows = [[name, "old", "conv_bwd_weight", "dwplane", json.dumps(dw), "NGCHW/GKYXC/NGKHW", "132", *shape]
            for shape in (small, large)]
    rows += [[f"bdwin-{lay}", "old", "conv_bwd_weight", "bdwin", "{}", f"{lay}/GKYXC/{lay[:-1]}K", "132", *ONE_TILE]
             for lay in ("GNHWC", "NHWGC")]
    rows = [[f"{r[0]}#{i}", *r[1:]] for i, r in enumerate(rows)]  # one name a row, as the mapping is by name
    mapping = {r[0]: ("old", "new") for r in rows}
    text, changed, _ = tool._rekey_csv(_text(rows), mapping, tool._any_of("dwplane_wgrad_columns,bdwin_not_group_major"))
    assert [r[1] for r in list(csv.reader(io.StringIO(text)))[1:]] == ["old", "new", "old", "new"] and changed == 2
    lines = [{"op": "conv_bwd_weight", "problem": f"2d-g{g}-n8-k1-c1-f7x7-i{w}x{w}-s1x1-d1x1-l3x3-r3x3",
              "layout": "NGCHW/GKYXC/NGKHW", "instance": name, "kernel_hash": "old"} for g, w in ((192, 28), (96, 60))]
    out, changed, kept = tool._rekey_jsonl("\n".join(json.dumps(x) for x in lines) + "\n", {name: ("old", "new")},
                                           tool._any_of("dwplane_wgrad_columns"))
    assert [json.loads(x)["kernel_hash"] for x in out.splitlines()] == ["old", "new"] and (changed, kept) == (1, 1)


def test_dwplane_data_run_blocks_stay_stale():
    """Session 40: a dwplane dgrad row or evidence line whose launch now reads run blocks (a 14x14 plane at j=32)
    stays stale, one on column blocks (56x56) is re-keyed, and relayout's rows are re-keyed."""
    cfg = {"block_m": 64, "j": 32, "prefetch": 0, "num_warps": 4, "num_stages": 1}
    name = "conv_bwd_data-dwplane-GNHWC_GKYXC_GNHWK-bf16-passthrough-m64_j32_pf0_w4_s1"
    small = ["2", "672", "8", "1", "1", "5x5", "14x14", "1x1", "1x1", "2x2", "2x2"]
    large = ["2", "96", "8", "1", "1", "7x7", "56x56", "1x1", "1x1", "3x3", "3x3"]
    rows = [[name, "old", "conv_bwd_data", "dwplane", json.dumps(cfg), "GNHWC/GKYXC/GNHWK", "132", *shape]
            for shape in (small, large)]
    rows += [["relayout", "old", "conv_bwd_data", "relayout", "{}", "GNHWC/GKYXC/GNHWK", "132", *small]]
    rows = [[f"{r[0]}#{i}", *r[1:]] for i, r in enumerate(rows)]
    mapping = {r[0]: ("old", "new") for r in rows}
    text, changed, _ = tool._rekey_csv(_text(rows), mapping, tool._any_of("dwplane_data_no_run"))
    assert [r[1] for r in list(csv.reader(io.StringIO(text)))[1:]] == ["old", "new", "new"] and changed == 2
    lines = [{"op": "conv_bwd_data", "problem": f"2d-g{g}-n8-k1-c1-f{f}x{f}-i{w}x{w}-s1x1-d1x1-l{f // 2}x{f // 2}-r{f // 2}x{f // 2}",
              "layout": "GNHWC/GKYXC/GNHWK", "instance": name, "kernel_hash": "old"} for g, f, w in ((672, 5, 14), (96, 7, 56))]
    out, changed, kept = tool._rekey_jsonl("\n".join(json.dumps(x) for x in lines) + "\n", {name: ("old", "new")},
                                           tool._any_of("dwplane_data_no_run"))
    assert [json.loads(x)["kernel_hash"] for x in out.splitlines()] == ["old", "new"] and (changed, kept) == (1, 1)


def test_add_param_renames_the_rows_of_the_old_build(tmp_path):
    """Session 47's ``row_stages``: a dwtile row measured with the old build's hash moves to the name with
    ``_rs0`` and the new hash (the parameter added to its params); a row of another hash stays as it was, and
    so do other families' rows; evidence lines move the same way."""
    new_name = "conv_bwd_data-dwtile-NHWGC_GKYXC_NHWGK-fp16-passthrough-bh8_bw8_ch16_rs0_w2"
    old_name = new_name.replace("_rs0", "")
    cfg = {"block_ch": 16, "block_h": 8, "block_w": 8, "num_warps": 2}
    (tmp_path / "old.json").write_text(json.dumps({old_name: "h_old", "other": "h_o"}))
    (tmp_path / "new.json").write_text(json.dumps({new_name: "h_new", "other": "h_o"}))
    shape = ["2", "144", "8", "1", "1", "3x3", "8x8", "1x1", "1x1", "1x1", "1x1"]
    rows = [_row(old_name, "dwtile", cfg, shape, op="conv_bwd_data"),
            _row(old_name, "dwtile", cfg, shape, op="conv_bwd_data"),
            _row("other", "direct", {"block_p": 16}, shape, op="conv_bwd_data")]
    rows[0][1], rows[1][1], rows[2][1] = "h_old", "h_stale", "h_o"
    db = tmp_path / "rows.csv"
    db.write_text(_text(rows))
    ev = tmp_path / "ev.jsonl"
    ev.write_text(json.dumps({"device": "x"}) + "\n" + json.dumps({"instance": old_name, "kernel_hash": "h_old"}) + "\n")
    tool.add_param(str(tmp_path / "old.json"), str(tmp_path / "new.json"), "dwtile", "row_stages", 0,
                   [str(db), str(ev)])
    got = list(csv.reader(io.StringIO(db.read_text())))[1:]
    assert (got[0][0], got[0][1]) == (new_name, "h_new") and json.loads(got[0][4]) == dict(cfg, row_stages=0)
    assert got[1][:2] == [old_name, "h_stale"] and got[2][:2] == ["other", "h_o"]
    line = json.loads(ev.read_text().splitlines()[1])
    assert (line["instance"], line["kernel_hash"]) == (new_name, "h_new")
