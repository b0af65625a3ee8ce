"""Carry tuning rows and verification evidence over a change of the kernel-hash formula.

A row or an evidence line names its instance and the kernel hash it was measured with. When the
formula changes but not the kernel code (e.g. session 4: module text -> the kernels' own code,
``instance_factory/kernel_identity.py``), a row whose hash equals the *old* formula's hash of its
instance measured exactly today's kernel, and gets the new hash; any other row (already stale)
is left as it is, so it stays stale.

    git stash; python tools/rekey_kernel_hashes.py dump old.json; git stash pop   # old formula
    python tools/rekey_kernel_hashes.py dump new.json                             # new formula
    python tools/rekey_kernel_hashes.py apply old.json new.json tuning_db/*.csv.gz evidence/*.jsonl evidence/gpu/*.jsonl

A kernel change that a row's run never launched leaves that row's measurement valid too:
``apply old.json new.json --only CHECK[,CHECK] FILES`` re-keys only the database rows that one of the
named checks (``ONLY`` below) accepts; an evidence line only where the check can judge it from the
line's op, dtype and instance (a check that needs the problem's launch plan leaves it stale). Session 29 changed pointwise
wgrad's reduce pass twice (H0 -> H1: BLOCK_S slabs a step everywhere; H1 -> H2: one slab a step,
H0's code, where the full rows fill the GPU), so:

    apply h0.json h1.json --only pointwise_reduce_none FILES          # no reduce pass: same code
    apply h0.json h2.json --only pointwise_reduce_one_slab FILES      # H0's loop is H2's one-slab loop
    apply h1.json h2.json --only pointwise_reduce_none,pointwise_reduce_block,relayout FILES
    apply h0.json h2.json --only relayout_without_pointwise FILES     # the rows not re-timed
    apply s30.json s31.json --only dgrad_pointwise_stride1 FILES      # session 31: strided bwd-data pointwise
    apply s32a.json s32b.json --only wgrad_tma_16bit,wgrad_relayout_tf32_before_s32 FILES  # session 32: dot_tn
    apply s42.json s43.json --only relayout_wgrad_not_padvec FILES    # session 43: the padvec family
    apply s45.json s46.json --only relayout_dgrad_not_dwtile FILES    # session 46: the dwtile family
    apply s49.json s50.json --only relayout_wgrad_not_tapshare FILES  # session 50: the tapshare family
    apply s51.json s52.json --only relayout_wgrad_not_bdring FILES    # session 52: the bdring family
    apply s52.json s53.json --only relayout_wgrad_not_bdstride FILES  # session 53: the bdstride family
    instance-factory db compact --db FILE                              # one row per identity again

A new config parameter renames every instance of its family. Where one value of it compiles the code of
before (the PTX diffed), ``add-param`` moves the rows and evidence measured with the old code to the new
name (the parameter added to ``instance_params``) and hash; rows measured with other code stay stale:

    add-param old.json new.json dwtile row_stages 0 FILES             # session 47: dwtile's row loop
    add-param old.json new.json dwslide num_stages 1 FILES            # session 48: dwslide's pipelined loop
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import sys
from pathlib import Path

from instance_factory.tuning.storage import encode_text, is_compressed


def dump(path: str) -> None:
    from instance_factory.registry import get_registry

    hashes = {i.name: i.kernel_hash for i in get_registry().instances()}
    Path(path).write_text(json.dumps(hashes, sort_keys=True))
    print(f"{len(hashes)} instances -> {path}")


def _pointwise_reduce(row: dict[str, str]) -> str:
    """Which reduce code a pointwise wgrad row's launch ran: "none" (one split, or reduce "last"),
    "one_slab" (the reduce pass's one-slab-a-step loop) or "block" (BLOCK_S slabs a step); "" for
    other rows."""
    from instance_factory.kernels import bwd_weight_pointwise as pointwise
    from instance_factory.layouts import parse_layout
    from instance_factory.tuning.schema import params_from_row

    if row["op"] != "conv_bwd_weight" or row["algorithm"] != "pointwise":
        return ""
    params = params_from_row(row)
    cfg = pointwise.BwdWeightPointwiseConfig(**json.loads(row["instance_params"]))
    sms = int(row["device_sms"])
    tiles, _, split = pointwise.plan(params, cfg, parse_layout(row["layout"], params.ndim), sms)
    if split == 1 or cfg.reduce == "last":
        return "none"
    return "one_slab" if pointwise.reduce_shape(tiles, split, cfg.block_m, cfg.block_n, sms)[1] == 1 else "block"


POINTWISE_REDUCE = {"pointwise_reduce_none": "none", "pointwise_reduce_one_slab": "one_slab",
                    "pointwise_reduce_block": "block"}
OTHER_CHECKS = {
    "relayout": lambda row: row["algorithm"] == "relayout",
    "relayout_without_pointwise": lambda row: row["algorithm"] == "relayout" and not _is_1x1_pad0(row),
    # session 31: bwd-data pointwise took strided 1x1 layers behind a STRIDED constexpr. Every row before
    # ran it on a stride-1 problem, whose compile drops the new code; relayout's strided rows never
    # launched it (it declined them)
    "dgrad_pointwise_stride1": lambda row: row["op"] == "conv_bwd_data" and row["algorithm"] in ("pointwise", "relayout"),
    # session 32: the TMA wgrad families' dot became dot_tn; 16-bit rows compile the same dot as before,
    # fp32_tf32 rows (bf16 hi/lo products now) stay stale
    "wgrad_tma_16bit": lambda row: (row["op"] == "conv_bwd_weight" and row["dtype"] != "fp32_tf32"
                                    and row["algorithm"] in ("tma", "shift", "pointwise", "rowstack", "relayout")),
    # session 32 (branch s32-tf32-dgrad-wcopy): tma / pointwise dgrad read a K-major weight copy in tf32 only
    "dgrad_wcopy_non_tf32": lambda row: (row["op"] == "conv_bwd_data" and row["dtype"] != "fp32_tf32"
                                         and row["algorithm"] in ("tma", "pointwise", "relayout")),
    # relayout's fp32_tf32 wgrad rows ran a twin that the TMA families declined before session 32
    "wgrad_relayout_tf32_before_s32": lambda row: (row["op"] == "conv_bwd_weight" and row["dtype"] == "fp32_tf32"
                                                   and row["algorithm"] == "relayout"
                                                   and row["timestamp"] < "2026-11-26T12:20"),
    # session 38: bdrow's x-tile channel offsets got a contiguity hint that changes only the group-major
    # compile (ALIGN > 1 without packed channels; the PTX of NHWGC and NGCHW instances is the same);
    # relayout runs channels-last twins
    "bdrow_not_group_major": lambda row: (row["algorithm"] == "relayout"
                                          or (row["algorithm"] == "bdrow" and not row["layout"].startswith("G"))),
    # session 39: the same hint in bdwin (its group-major txall builds changed; tx1 ones and NHWGC / NGCHW compile
    # as before)
    "bdwin_not_group_major": lambda row: (row["algorithm"] == "relayout"
                                          or (row["algorithm"] == "bdwin" and not row["layout"].startswith("G"))),
    # session 39: dwplane wgrad cuts small planes into blocks of whole rows (ROWS > 0); its ROWS 0 build (column
    # blocks) compiles to the PTX of before
    "dwplane_wgrad_columns": lambda row: (row["op"] == "conv_bwd_weight" and row["algorithm"] == "dwplane"
                                          and _dwplane_wgrad_rows(row) == 0),
    # session 39's review moved the row blocks' tap read-off to depthwise_plane_rows and passed its gather choice
    # from the host: every dwplane wgrad build compiles to the same PTX (diffed per block mode)
    "dwplane_wgrad_same_code": lambda row: row["op"] == "conv_bwd_weight" and row["algorithm"] == "dwplane",
    # session 40: dwplane dgrad reads small planes in run blocks (RUN > 0, one grad_out run for every filter row);
    # its builds without them compile to the PTX of before (diffed); relayout runs channels-last twins
    "dwplane_data_no_run": lambda row: (row["algorithm"] == "relayout"
                                        or (row["op"] == "conv_bwd_data" and row["algorithm"] == "dwplane"
                                            and _dwplane_data_run(row) == 0)),
    # session 43: the new wgrad family padvec changed every wgrad relayout hash; a relayout row whose twin
    # lookup can run neither padx nor padvec launched the same code as before, and would launch it today
    "relayout_wgrad_not_padvec": lambda row: (row["op"] == "conv_bwd_weight" and row["algorithm"] == "relayout"
                                              and not _padvec_may_run(row)),
    # session 46: the new dgrad family dwtile changed every dgrad relayout hash; a relayout row whose twin dwtile
    # cannot run (not depthwise at stride 1) launched the same code as before, and would launch it today
    "relayout_dgrad_not_dwtile": lambda row: (row["op"] == "conv_bwd_data" and row["algorithm"] == "relayout"
                                              and not _dwtile_may_run(row)),
    # session 50: the new wgrad family tapshare changed every wgrad relayout hash; a relayout row whose twin
    # tapshare cannot run launched the same code as before, and would launch it today
    "relayout_wgrad_not_tapshare": lambda row: (row["op"] == "conv_bwd_weight" and row["algorithm"] == "relayout"
                                                and not _tapshare_may_run(row)),
    # session 52: the new wgrad family bdring changed every wgrad relayout hash; likewise for the rows whose
    # twin bdring cannot run
    "relayout_wgrad_not_bdring": lambda row: (row["op"] == "conv_bwd_weight" and row["algorithm"] == "relayout"
                                              and not _bdring_may_run(row)),
    # session 53: likewise for the new wgrad family bdstride (strided layers of 4-16 channels per group)
    "relayout_wgrad_not_bdstride": lambda row: (row["op"] == "conv_bwd_weight" and row["algorithm"] == "relayout"
                                                and not _bdstride_may_run(row)),
}
ONLY = {*POINTWISE_REDUCE, *OTHER_CHECKS}


def _row_params(row: dict[str, str]):
    """The ConvParams of a database row, or of an evidence line from its problem key."""
    from instance_factory.problem import ConvParams
    from instance_factory.tuning.schema import params_from_row

    return params_from_row(row) if "instance_params" in row else ConvParams.from_key(row["problem"])


def _dwtile_may_run(row: dict[str, str]) -> bool:
    """dwtile could serve the row's problem's channels-last twin (depthwise, C = K = 1, stride 1)."""
    p = _row_params(row)
    return p.C == 1 and p.K == 1 and all(s == 1 for s in p.stride)


def _tapshare_may_run(row: dict[str, str]) -> bool:
    """tapshare could serve the row's problem's channels-last twin (its declines that the problem alone decides)."""
    from instance_factory.kernels.bwd_weight_tapshare import problem_reason

    return problem_reason(_row_params(row)) is None


def _bdring_may_run(row: dict[str, str]) -> bool:
    """bdring could serve the row's problem's channels-last twin (16-bit data, C == K in 4 / 8 / 16, stride and
    dilation 1, 1D / 2D, filters up to 3 x 3, rows up to 128 wide; packed NHWGC rows of a multiple of 8 channels)."""
    from instance_factory.kernels.bwd_weight_bdring import problem_reason

    p = _row_params(row)
    return row.get("dtype") in ("fp16", "bf16", "bf16_fp32w") and problem_reason(p) is None and (p.G * p.C) % 8 == 0


def _bdstride_may_run(row: dict[str, str]) -> bool:
    """bdstride could serve the row's problem's channels-last twin (16-bit data, C == K in 4 / 8 / 16, a stride
    over 1, dilation 1, 1D / 2D, filters up to 3 x 3; packed NHWGC rows of a multiple of 8 channels)."""
    from instance_factory.kernels.bwd_weight_bdstride import problem_reason

    p = _row_params(row)
    return row.get("dtype") in ("fp16", "bf16", "bf16_fp32w") and problem_reason(p) is None and (p.G * p.C) % 8 == 0


def _padvec_may_run(row: dict[str, str]) -> bool:
    """padx or padvec could serve the row's problem (K >= 16 and C <= 8, or a dense layer of several taps with
    C <= 32): relayout's twin lookup may have launched padx, or may launch padvec now."""
    p = _row_params(row)
    return p.K >= 16 and (p.C <= 8 or (p.G == 1 and p.C <= 32 and math.prod(p.filter) > 1))


def _row_problem(row: dict[str, str], keys: tuple[str, ...], pattern: str):
    """(problem, layout, the config's ``keys``) of a database row, or of an evidence line from its problem and
    instance name (``pattern``'s groups, in the order of ``keys``); None where neither says."""
    import re

    from instance_factory.layouts import parse_layout
    from instance_factory.problem import ConvParams
    from instance_factory.tuning.schema import params_from_row

    if "instance_params" in row:
        p, cfg = params_from_row(row), json.loads(row["instance_params"])
        values = [int(cfg[k]) for k in keys]
    elif "problem" in row and (m := re.search(pattern, row.get("instance", ""))):
        p, values = ConvParams.from_key(row["problem"]), [int(v) for v in m.groups()]
    else:
        return None
    return p, parse_layout(row["layout"], p.ndim), values


def _dwplane_wgrad_rows(row: dict[str, str]) -> int:
    """The rows per block a dwplane wgrad row's launch uses today (0: column blocks), from a database row or an
    evidence line (its problem and instance name); -1 where neither says."""
    from instance_factory.geometry import ConvGeometry
    from instance_factory.kernels import depthwise_plane as dpl

    found = _row_problem(row, ("j", "num_warps"), r"_j(\d+)_pf\d_w(\d+)_")
    if found is None:
        return -1
    p, layout, (j, warps) = found
    return dpl.geometry_plan(ConvGeometry.build(p, layout), j, warps).rows


def _dwplane_data_run(row: dict[str, str]) -> int:
    """The run a dwplane dgrad row's launch reads today (0: none), from a database row or an evidence line (its
    problem and instance name); -1 where neither says."""
    from instance_factory.geometry import ConvGeometry
    from instance_factory.kernels import depthwise_plane as dpl
    from instance_factory.kernels import depthwise_plane_data as dpd

    found = _row_problem(row, ("block_m", "j", "num_warps"), r"-m(\d+)_j(\d+)_pf\d_w(\d+)_")
    if found is None:
        return -1
    p, layout, (block_m, j, warps) = found
    vec = dpl.plane_vector(ConvGeometry.build(p, layout))
    return dpd.problem_plan(p, j, vec, dpd.max_run(block_m, j, warps)).run


def _is_1x1_pad0(row: dict[str, str]) -> bool:
    """pointwise runs only these: relayout's inner lookup on any other problem never launched it."""
    from instance_factory.tuning.schema import params_from_row

    return params_from_row(row).is_1x1_pad0


def _any_of(names: str):
    """One check accepting a row that any of ``names`` accepts (a pointwise row's plan computed once)."""
    kinds = {POINTWISE_REDUCE[n] for n in names.split(",") if n in POINTWISE_REDUCE}
    others = [OTHER_CHECKS[n] for n in names.split(",") if n in OTHER_CHECKS]
    return lambda row: any(c(row) for c in others) or (bool(kinds) and _pointwise_reduce(row) in kinds)


def _csv_text(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _edit_csv(text: str, editor) -> tuple[str, int, int]:
    """Database rows through ``editor(head)(row)``: True when it changed the row in place, False for a row it
    kept as it was, None for a row it does not count."""
    rows = list(csv.reader(io.StringIO(text)))
    edit = editor(rows[0])
    verdicts = [edit(row) for row in rows[1:]]
    return _csv_text(rows), verdicts.count(True), verdicts.count(False)


def _edit_jsonl(text: str, edit) -> tuple[str, int, int]:
    """Evidence lines through ``edit(rec, line)`` -> (line, verdict), the verdicts as for :func:`_edit_csv`;
    blank and non-object lines pass through uncounted."""
    lines, verdicts = [], []
    for line in text.splitlines():
        rec = json.loads(line) if line.strip() else None
        if isinstance(rec, dict):
            line, verdict = edit(rec, line)
            verdicts.append(verdict)
        lines.append(line)
    return ("\n".join(lines) + ("\n" if text.endswith("\n") else ""), verdicts.count(True),
            verdicts.count(False))


def _rekey_csv(text: str, mapping: dict[str, tuple[str, str]], only=None) -> tuple[str, int, int]:
    def editor(head: list[str]):
        i_inst, i_hash = head.index("instance"), head.index("kernel_hash")

        def edit(row: list[str]) -> bool:
            old_new = mapping.get(row[i_inst])
            if old_new and row[i_hash] == old_new[0] and (only is None or only(dict(zip(head, row)))):
                row[i_hash] = old_new[1]
                return True
            return False

        return edit

    return _edit_csv(text, editor)


def _evidence_accepts(only, rec: dict) -> bool:
    """Whether ``only`` accepts an evidence line (its algorithm read from the instance name); a check
    that needs fields evidence lines lack (a problem key, a timestamp) leaves the line stale."""
    try:
        return bool(only({**rec, "algorithm": rec["instance"].split("-")[1]}))
    except (KeyError, IndexError, ValueError):
        return False


def _rekey_jsonl(text: str, mapping: dict[str, tuple[str, str]], only=None) -> tuple[str, int, int]:
    def edit(rec: dict, line: str) -> tuple[str, bool | None]:
        if "kernel_hash" not in rec or "instance" not in rec:
            return line, None
        old_new = mapping.get(rec["instance"])
        if old_new and rec["kernel_hash"] == old_new[0] and (only is None or _evidence_accepts(only, rec)):
            return line.replace(f'"kernel_hash": "{old_new[0]}"', f'"kernel_hash": "{old_new[1]}"'), True
        return line, False

    return _edit_jsonl(text, edit)


def _renames(algorithm: str, param: str, value: int) -> dict[str, tuple[str, dict]]:
    """old instance name -> (its name with ``param`` = ``value`` added, that config) for every instance of
    ``algorithm`` in today's registry with that value: the old name is today's name without the parameter."""
    from types import SimpleNamespace

    from instance_factory.algorithms import ALGORITHMS
    from instance_factory.instance import config_tag
    from instance_factory.registry import get_registry

    out = {}
    for inst in get_registry().instances():
        if inst.algorithm != algorithm or inst.cfg.get(param) != value:
            continue
        alg = ALGORITHMS[(inst.op, algorithm)]
        tag = config_tag(alg, inst.cfg)
        old_tag = config_tag(SimpleNamespace(param_names=[n for n in alg.param_names if n != param]), inst.cfg)
        out[inst.name[: -len(tag)] + old_tag] = (inst.name, inst.cfg)
    return out


def _rename_csv(text: str, renames: dict, old: dict, new: dict, param: str, value: int) -> tuple[str, int, int]:
    def editor(head: list[str]):
        i_inst, i_hash, i_params = head.index("instance"), head.index("kernel_hash"), head.index("instance_params")

        def edit(row: list[str]) -> bool | None:
            hit = renames.get(row[i_inst])
            if not hit:
                return None
            if row[i_hash] != old.get(row[i_inst]):
                return False
            cfg = {**json.loads(row[i_params]), param: value}
            row[i_inst], row[i_hash] = hit[0], new[hit[0]]
            row[i_params] = json.dumps(dict(sorted(cfg.items())), separators=(",", ":"))
            return True

        return edit

    return _edit_csv(text, editor)


def _rename_jsonl(text: str, renames: dict, old: dict, new: dict) -> tuple[str, int, int]:
    def edit(rec: dict, line: str) -> tuple[str, bool | None]:
        hit = renames.get(rec.get("instance", ""))
        if not hit:
            return line, None
        if rec.get("kernel_hash") != old.get(rec["instance"]):
            return line, False
        return json.dumps({**rec, "instance": hit[0], "kernel_hash": new[hit[0]]}), True

    return _edit_jsonl(text, edit)


def _rewrite(files: list[str], on_csv, on_jsonl, said: str) -> None:
    """Each file through ``on_csv`` (database rows) or ``on_jsonl`` (evidence lines), text -> (text, changed,
    kept), written back atomically in the bytes storage.write_db would write (the shipped tier: gzip'd)."""
    for f in files:
        raw = Path(f).read_bytes()
        text = (gzip.decompress(raw) if is_compressed(f) else raw).decode("utf-8")
        out, changed, kept = (on_csv if f.endswith((".csv", ".csv.gz")) else on_jsonl)(text)
        if out != text:
            tmp = Path(f + ".rekey.tmp")
            tmp.write_bytes(encode_text(f, out))
            os.replace(tmp, f)
        print(f"{f}: {changed} {said[0]}, {kept} {said[1]}")


def add_param(old_path: str, new_path: str, algorithm: str, param: str, value: int, files: list[str]) -> None:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    renames = _renames(algorithm, param, value)
    _rewrite(files, lambda t: _rename_csv(t, renames, old, new, param, value),
             lambda t: _rename_jsonl(t, renames, old, new), ("renamed", "of the family left stale"))


def apply(old_path: str, new_path: str, files: list[str], only: str | None = None) -> None:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    mapping = {name: (old[name], new[name]) for name in old.keys() & new.keys()}
    check = _any_of(only) if only else None
    # evidence lines: re-keyed where the check can judge them from op, dtype and instance
    _rewrite(files, lambda t: _rekey_csv(t, mapping, check), lambda t: _rekey_jsonl(t, mapping, check),
             ("re-keyed", "left as they were"))

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif len(sys.argv) >= 8 and sys.argv[1] == "add-param":
        add_param(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7:])
    elif (len(sys.argv) >= 7 and sys.argv[1] == "apply" and sys.argv[4] == "--only"
          and set(sys.argv[5].split(",")) <= ONLY):
        apply(sys.argv[2], sys.argv[3], sys.argv[6:], only=sys.argv[5])
    elif len(sys.argv) >= 5 and sys.argv[1] == "apply" and sys.argv[4] != "--only":
        apply(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)
