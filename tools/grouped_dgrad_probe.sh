#!/usr/bin/env bash
# One device call for a grouped-dgrad family (session 21): its GPU tests, CK's problem lists, the
# grouped / grouped_wide layers of grouped_depthwise tuned beside the current best families in the
# same run, and Nsight Compute on ResNeXt's G64 C4 56x56 layer. Results under $OUT/probe.tgz.
#
#   FAMILY=bdroll VS=bdtap,blockdiag DTYPES=bf16 NCU_VARIANT='bdroll:{"block_w":32,...}' \
#     bash tools/grouped_dgrad_probe.sh
set -u
FAMILY=${FAMILY:?name the family under test}
export PYTHONPATH=$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 NCU_OP=conv_bwd_data
R=/tmp/grouped_dgrad_probe; mkdir -p "$R" "${OUT:=gpu_out}"
SET=$R/grouped_only.yaml
python3 - "$SET" <<'PY'
import sys, yaml
d = yaml.safe_load(open("configs/problem_sets/grouped_depthwise.yaml"))
d["problems"] = [p for p in d["problems"] if p["G"] > 1 and 1 < max(p["C"], p["K"]) <= 64]
d["name"] = "grouped_only"
yaml.safe_dump(d, open(sys.argv[1], "w"), sort_keys=False)
PY
tests=tests/test_grouped_${TEST_MODULE:-$FAMILY}.py
[[ -f $tests ]] && timeout 180 python3 -m pytest -q -n 8 -p no:cacheprovider "$tests" 2>&1 | tail -2
timeout 120 python3 tools/gpu_check.py --ck --ops conv_bwd_data --algorithms "$FAMILY" --out "$R" --tag "ck-$FAMILY" \
  --budget-s 100 2>&1 | tail -1
timeout 240 python3 -m instance_factory tune "$SET" --quiet --compile-workers 12 --pass data --dtype "${DTYPES:-bf16}" \
  --instances "$FAMILY,${VS:-bdtap,blockdiag}" --db "$R/probe.csv" --max-minutes 3 2>&1 | grep -v '^$' | tail -20
if [[ -n ${NCU_VARIANT:-} ]]; then
  timeout 90 bash tools/ncu_one.sh "$R" resnext_g64_c4_56 "$NCU_VARIANT" "_${FAMILY}|_bd" > /dev/null 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Hit|Warp Cycles Per Issued|Registers Per|Achieved Occ" \
    "$R"/ncu_*.txt | sed 's/.*ncu_resnext_g64_c4_56_data_//' | cut -c1-150
fi
tar -C "$R" -czf "$OUT/probe.tgz" .
