"""GPU check of the Dask sweep: the same small real problem set tuned by the plain sweep and by a Dask
sweep on a local CUDA cluster (dask-cuda's LocalCUDACluster: one worker per GPU; here one GPU), and
their rows compared in content. Both time cuDNN (cudnn.benchmark on, channels-last) in the same run,
as every tuner row does.

    python tools/dask_sweep_check.py --out $OUT                 # GPU: ResNet-50 layers, bf16, both passes
    TRITON_INTERPRET=1 python tools/dask_sweep_check.py --cpu-smoke --out /tmp/x   # CPU: tiny problems

Same rows in content: the same (problem, instance) pairs, kernel hashes, statuses (pruning off, so a
status does not depend on timing noise) and tolerances; verification errors equal (split-K atomic
kernels may differ in the last bits, so "equal" allows 1e-3 of the tolerance). Timings differ by
noise only; the table shows both, per problem, with cuDNN's. Writes dask_sweep_check.json and .md
to --out and prints the table last. Exit status 0 when the rows match and both sweeps finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GPU_LAYERS = ("layer2.1.conv1", "layer2.1.conv2", "layer3.0.conv2")  # 1x1, 3x3, 3x3 stride 2
CONTENT = ["instance_params", "kernel_hash", "status", "tolerance"]


def _problems(cpu_smoke: bool) -> list:
    from instance_factory.problem import ConvParams
    from instance_factory.tuning.problem_sets import Problem, expand_problem_set

    if cpu_smoke:
        ps = [ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
              ConvParams(2, 2, 2, 4, 4, (3, 3), (5, 5), (2, 2), (1, 1), (1, 1), (1, 1))]
        return [Problem(op, p, "NHWGC/GKYXC/NHWGK", "bf16", name=f"smoke{i}")
                for i, p in enumerate(ps) for op in ("conv_bwd_data", "conv_bwd_weight")]
    probs = expand_problem_set("resnet50", dtypes=["bf16"], passes=["data", "weight"])
    return [p for p in probs if p.name in GPU_LAYERS]


def _cluster(cpu_smoke: bool) -> tuple:
    """(client, cluster, description): LocalCUDACluster on a GPU (a plain one-worker LocalCluster if
    dask-cuda cannot be imported, said in the description), two CPU workers in the smoke run."""
    import distributed

    from instance_factory.tuning.dask_sweep import start_local_cluster

    try:
        cluster = start_local_cluster(2 if cpu_smoke else None)
        kind = type(cluster).__name__
    except Exception as exc:  # dask-cuda missing or not working with this CUDA stack: say so, go on
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None)
        kind = f"LocalCluster (dask-cuda unavailable: {exc})"
    client = distributed.Client(cluster)
    return client, cluster, f"{kind}, {len(client.scheduler_info()['workers'])} worker(s)"


def _compare(plain, dask) -> dict:
    """Row-by-row comparison of the two sweeps' rows (pandas frames)."""
    key = ["problem_key", "instance"]
    a, b = plain.set_index(key), dask.set_index(key)
    only_plain, only_dask = sorted(set(a.index) - set(b.index)), sorted(set(b.index) - set(a.index))
    common = sorted(set(a.index) & set(b.index))
    content_diff, err_diff, err_equal = [], 0.0, 0
    for k in common:
        ra, rb = a.loc[k], b.loc[k]
        for c in CONTENT:
            va, vb = ra[c], rb[c]
            if not (va == vb or (isinstance(va, float) and math.isnan(va) and math.isnan(vb))):
                content_diff.append(f"{k[1]} on {k[0]}: {c} {va!r} vs {vb!r}")
        for c in ("rel_err", "max_rel_err"):
            va, vb = float(ra[c]), float(rb[c])
            if math.isfinite(va) and math.isfinite(vb):
                d = abs(va - vb) / float(ra["tolerance"])
                err_diff = max(err_diff, d)
                err_equal += va == vb
                if d > 1e-3:
                    content_diff.append(f"{k[1]} on {k[0]}: {c} {va:.3g} vs {vb:.3g}")
    return {"rows_plain": len(a), "rows_dask": len(b), "common": len(common),
            "only_plain": [" on ".join(k[::-1]) for k in only_plain][:20],
            "only_dask": [" on ".join(k[::-1]) for k in only_dask][:20],
            "content_differences": content_diff[:50], "n_content_differences": len(content_diff),
            "errors_bit_identical": err_equal, "max_error_difference_in_tolerances": err_diff}


def _per_problem(plain, dask, problems) -> list[dict]:
    from instance_factory.tuning.database import best_per_problem

    out = []
    bp, bd = best_per_problem(plain).set_index("problem_key"), best_per_problem(dask).set_index("problem_key")
    for p in problems:
        r = {"problem": f"{p.name} {p.op[5:]} {p.dtype}", "key": p.key}
        for tag, best in (("plain", bp), ("dask", bd)):
            if p.key in best.index:
                row = best.loc[p.key]
                r[f"{tag}_best"] = row["instance"]
                r[f"{tag}_ms"] = float(row["median_ms"])
                r[f"{tag}_cudnn_ms"] = float(row["cudnn_ms"]) if row["cudnn_ms"] == row["cudnn_ms"] else None
        out.append(r)
    return out


def _table(rows: list[dict]) -> str:
    def f(v) -> str:
        return "-" if v is None else f"{v:.4g}"

    lines = ["| problem | plain best ms | dask best ms | dask/plain | cuDNN ms (plain run) | cuDNN ms (dask run) | "
             "same winner |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        pm, dm = r.get("plain_ms"), r.get("dask_ms")
        ratio = f"{dm / pm:.2f}" if pm and dm else "-"
        same = "yes" if r.get("plain_best") and r.get("plain_best") == r.get("dask_best") else "no"
        lines.append(f"| {r['problem']} | {f(pm)} | {f(dm)} | {ratio} | {f(r.get('plain_cudnn_ms'))} | "
                     f"{f(r.get('dask_cudnn_ms'))} | {same} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "dask_check_out"))
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny problems in the Triton interpreter")
    ap.add_argument("--max-instances", type=int, default=None, help="candidates per problem (GPU default 10)")
    ap.add_argument("--minutes", type=float, default=2.5, help="deadline of each sweep (default 2.5)")
    ns = ap.parse_args()
    if ns.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    # the cluster's worker processes unpickle tasks by module name: let them import this checkout
    repo = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])])
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from instance_factory.tuning.dask_sweep import dask_sweep
    from instance_factory.tuning.database import read_db
    from instance_factory.tuning.sweep import sweep

    problems = _problems(ns.cpu_smoke)
    opts = dict(max_instances=ns.max_instances or (1 if ns.cpu_smoke else 10), prune=False, progress=False,
                max_minutes=ns.minutes)
    if ns.cpu_smoke:
        opts.update(cpu_reps=1, cudnn=False)
    for f in ("plain.csv", "dask.csv"):
        (out / f).unlink(missing_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not ns.cpu_smoke else "cpu"
    print(f"{len(problems)} problems on {device}: plain sweep ...", flush=True)
    t0 = time.monotonic()
    plain = sweep(problems, db=str(out / "plain.csv"), workers=1, **opts)
    t_plain = time.monotonic() - t0
    print(f"plain sweep: {plain.tuned} rows in {t_plain:.1f} s; starting the Dask cluster ...", flush=True)
    t0 = time.monotonic()
    try:
        client, cluster, described = _cluster(ns.cpu_smoke)
        t_start = time.monotonic() - t0
        try:
            t0 = time.monotonic()
            dask = dask_sweep(problems, client=client, db=str(out / "dask.csv"), **opts)
            t_dask = time.monotonic() - t0
        finally:
            client.close()
            cluster.close()
    except Exception as exc:
        import traceback

        (out / "dask_sweep_check.json").write_text(json.dumps(
            {"device": device, "plain_s": t_plain, "plain_rows": plain.tuned, "dask_error": repr(exc),
             "traceback": traceback.format_exc(), "rows_match": False}, indent=2))
        traceback.print_exc()
        print(f"FAIL: the Dask sweep raised {exc!r}")
        return 1
    print(f"dask sweep on {described}: {dask.tuned} rows in {t_dask:.1f} s (cluster start {t_start:.1f} s)",
          flush=True)
    a, b = read_db(out / "plain.csv"), read_db(out / "dask.csv")
    cmp = _compare(a, b)
    per = _per_problem(a, b, problems)
    finished = not plain.stopped_early and not dask.stopped_early and not dask.failed_problems
    ok = finished and cmp["n_content_differences"] == 0 and not cmp["only_plain"] and not cmp["only_dask"]
    result = {"device": device, "torch": torch.__version__, "cluster": described, "problems": len(problems),
              "options": {k: v for k, v in opts.items() if k != "progress"}, "plain_s": t_plain, "dask_s": t_dask,
              "cluster_start_s": t_start, "plain_stopped_early": plain.stopped_early,
              "dask_stopped_early": dask.stopped_early, "dask_failed_problems": dask.failed_problems,
              "comparison": cmp, "per_problem": per, "rows_match": ok}
    (out / "dask_sweep_check.json").write_text(json.dumps(result, indent=2, default=str))
    table = _table(per)
    verdict = ("PASS: the Dask sweep's rows match the plain sweep's in content" if ok else
               f"FAIL: finished={finished}, {cmp['n_content_differences']} content differences, "
               f"{len(cmp['only_plain'])} rows only in the plain sweep, {len(cmp['only_dask'])} only in the Dask one")
    md = (f"### Dask sweep vs plain sweep on {device}\n\n{len(problems)} problems, {cmp['common']} rows compared; "
          f"cluster: {described}; plain {t_plain:.1f} s, Dask {t_dask:.1f} s (+{t_start:.1f} s cluster start); "
          f"verification errors bit-identical in {cmp['errors_bit_identical']} of {2 * cmp['common']}.\n\n"
          f"{table}\n\n{verdict}\n")
    (out / "dask_sweep_check.md").write_text(md)
    for d in cmp["content_differences"][:10]:
        print("  differs:", d)
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
