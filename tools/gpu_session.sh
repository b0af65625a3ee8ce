#!/usr/bin/env bash
# One device run made of named steps, each under its own time limit, logs kept under $OUT.
#
#   bash tools/gpu_session.sh STEP[:SECONDS] ...
#
# Steps (see docs/BENCHMARKS.md, "Waiting for a GPU"): env, pytest_new, pytest_gpu, ck_blockdiag,
# tune_gd, bench_gd, untuned, train, dask, ship; pytest_dws, ck_dws, probe, ncu, tune_dws (issue 11, sessions 6-7; DW_ALGS picks the families); pytest_bdrow, ck_bdrow, tune_grouped
# (session 8: grouped few-channel wgrad; needs .devout/grouped_only.yaml and gd.csv carried);
# pytest_files (PYTEST_FILES), ck_algs (CK_ALGS, CK_OPS), probe_ab (PROBE_OP, PROBE_VARIANTS,
# PROBE_PROBLEMS: variants on this tree vs the package copy in .devout/old), matrix (session 9); fuzz, fuzz_torch
# (tools/fuzz_verify.py on the GPU: large shapes, Gluon families; FUZZ_SEED), c32 (session 55: applies the 32-channel
# bdring / bdstride patch to this tree and runs both families' tests; later steps then see the patched kernels). Everything a step writes goes to $RES, packed into
# $OUT/results.tgz at the end (the device returns at most 8 files); the whole log is $OUT/session.log.
set -uo pipefail
OUT=${OUT:-gpu_out}
RES=/tmp/results
mkdir -p "$OUT" "$RES"
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/session.log"

step() {  # name, seconds, command...
  local name=$1 secs=$2; shift 2
  echo "=== $name (limit ${secs}s) $(date +%T)" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$secs" "$@" 2>&1 | tee -a "$LOG" "$RES/$name.log" | tail -n 60
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$LOG"
  echo "$name rc=$rc $((SECONDS - t0))s" >> "$RES/steps.txt"
}

run_step() {
  local name=${1%%:*} secs=${1#*:}
  [[ "$secs" == "$1" ]] && secs=300
  case "$name" in
    env) step env "$secs" bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv;
         python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"' ;;
    pytest_new) step pytest_new "$secs" python3 -m pytest -q -n 8 -p no:cacheprovider \
         tests/test_grouped_blockdiag.py tests/test_torch_integration.py ;;
    pytest_gpu) step pytest_gpu "$secs" python3 -m pytest -q -n 8 -p no:cacheprovider \
         tests/test_gpu_kernels.py tests/test_tuning_gpu.py tests/test_fast_launch.py \
         tests/test_direct_grouped.py tests/test_bwd_data_igemm.py tests/test_bwd_weight_igemm.py \
         tests/test_torch_integration.py tests/test_depthwise_stream.py tests/test_depthwise_slide.py ;;
    ck_blockdiag) step ck_blockdiag "$secs" python3 tools/gpu_check.py --ck --algorithms blockdiag \
         --out "$RES" --tag blockdiag --budget-s $((secs - 30)) ;;
    pytest_dws) step pytest_dws "$secs" python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_depthwise_slide.py ;;
    ck_dws) step ck_dws "$secs" python3 tools/gpu_check.py --ck --algorithms "${DW_ALGS:-dwslide}" \
         --out "$RES" --tag dw --budget-s $((secs - 30)) ;;
    probe) step probe "$secs" python3 tools/wgrad_probe.py --out "$RES" ;;
    ncu) step ncu "$secs" bash tools/ncu_wgrad.sh "$RES" ;;
    ncu_one) step ncu_one "$secs" bash tools/ncu_one.sh "$RES" "$NCU_PROB" "$NCU_VAR" "$NCU_KRE" ;;
    tune_dws) [[ -f .devout/gd.csv && ! -f "$RES/gd.csv" ]] && cp .devout/gd.csv "$RES/gd.csv"
         step tune_dws "$secs" python3 -m instance_factory tune grouped_depthwise --db "$RES/gd.csv" --dtype "${GD_DTYPES:-bf16}" \
         --pass weight --instances "${DW_ALGS:-dwslide,dwstream}" --max-minutes $(((secs - 40) / 60)) --quiet --compile-workers 12 ;;
    pytest_bdrow) step pytest_bdrow "$secs" python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_grouped_rows.py ;;
    ck_bdrow) step ck_bdrow "$secs" python3 tools/gpu_check.py --ck --algorithms bdrow --out "$RES" --tag bdrow \
         --budget-s $((secs - 30)) ;;
    tune_grouped) [[ -f .devout/gd.csv && ! -f "$RES/gd.csv" ]] && cp .devout/gd.csv "$RES/gd.csv"
         step tune_grouped "$secs" python3 -m instance_factory tune .devout/grouped_only.yaml --db "$RES/gd.csv" \
         --dtype "${GD_DTYPES:-bf16}" --pass "${GD_PASS:-weight}" --instances "${GR_ALGS:-bdrow,blockdiag}" ${GD_LAYOUT:+--layout "$GD_LAYOUT"} \
         --max-minutes $(((secs - 40) / 60)) --quiet --compile-workers 12 ;;
    ck_all) step ck_all "$secs" python3 tools/gpu_check.py --ck --ck-one-dtype --out "$RES" --tag all \
         --budget-s $((secs - 30)) ;;
    tune_gd) step tune_gd "$secs" python3 -m instance_factory tune grouped_depthwise --db "$RES/gd.csv" --dtype "${GD_DTYPES:-bf16,fp16}" \
         --max-minutes $(((secs - 40) / 60)) --quiet --compile-workers 12 ;;
    bench_gd) step bench_gd "$secs" python3 -m instance_factory bench grouped_depthwise --db "$RES/gd.csv" --dtype "${GD_DTYPES:-bf16,fp16}" \
         --summary-csv "$RES/summary.csv" -o "$RES/bench_gd.md" --quiet ;;
    untuned) step untuned "$secs" python3 tools/untuned_check.py --out "$RES" --budget-min $(((secs - 60) / 60)) ;;
    train) step train "$secs" python3 tools/train_step_check.py --out "$RES" --fuse-residual --budget-s $((secs - 90)) ;;
    dask) step dask "$secs" bash -c 'python3 -m pip install -q --no-index --no-deps --no-compile \
         --no-cache-dir --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site python3 tools/dask_sweep_check.py --out '"$RES"' \
         --minutes '"$(awk "BEGIN{print ($secs - 70) / 120}")" ;;
    ship) step ship "$secs" python3 tools/ship_db_sweep.py --minutes $(((secs - 60) / 60)) --db "$RES/ship.csv" --out "$RES" ;;
    pytest_files) step pytest_files "$secs" python3 -m pytest -q -n 8 -p no:cacheprovider $PYTEST_FILES ;;
    ck_algs) step ck_algs "$secs" python3 tools/gpu_check.py --ck --ops "${CK_OPS:-conv_bwd_data,conv_bwd_weight}" \
         --algorithms "$CK_ALGS" --out "$RES" --tag "ck-${CK_ALGS//,/-}" --budget-s $((secs - 30)) ;;
    probe_ab) for pkg in new old; do  # the same variants on this tree and on the package copy in .devout/old
           pp=$PWD; [[ $pkg == old ]] && pp=$PWD/.devout/old
           step "probe_$pkg" $((secs / 2)) env PYTHONPATH="$pp" python3 tools/wgrad_probe.py --op "${PROBE_OP:-conv_bwd_weight}" \
             --variants "$PROBE_VARIANTS" --problems "$PROBE_PROBLEMS" --out "$RES" --tag "_$pkg"
         done ;;
    matrix) step matrix "$secs" python3 tools/gpu_check.py --matrix --out "$RES" --tag matrix --budget-s $((secs - 30)) ;;
    fuzz) step fuzz "$secs" python3 tools/fuzz_verify.py --seed "${FUZZ_SEED:-0}" --seconds $((secs - 60)) --out "$RES/fuzz" ;;
    fuzz_torch) step fuzz_torch "$secs" python3 tools/fuzz_verify.py --torch --seed "${FUZZ_SEED:-0}" \
         --seconds $((secs - 60)) --out "$RES/fuzz" ;;
    c32) step c32 "$secs" bash -c 'git apply docs/bench/s55-bdring-c32-four-warp-unverified.patch && python3 -m pytest -q -n 8 \
         -p no:cacheprovider tests/test_bwd_weight_bdring.py tests/test_bwd_weight_bdstride.py' ;;
    *) echo "unknown step $name" | tee -a "$LOG" ;;
  esac
}

for s in "$@"; do run_step "$s"; done
tar -C "$RES" -czf "$OUT/results.tgz" . 2>/dev/null
echo "=== steps"; cat "$RES/steps.txt"
