#!/usr/bin/env bash
# One device call for a grouped family of either pass (sessions 21, 22): its GPU tests, CK's problem
# lists, the grouped / grouped_wide layers of grouped_depthwise tuned beside the current best families
# in the same run (per-problem best of each family vs cuDNN printed last), and Nsight Compute on one
# layer. Results under $OUT/probe.tgz.
#
#   PASS=data FAMILY=bdroll VS=bdtap,blockdiag DTYPES=bf16 NCU_VARIANT='bdroll:{"block_w":32,...}' \
#     bash tools/grouped_probe.sh
#   PASS=weight FAMILY=bdwin VS=bdrow TEST_MODULE=window NCU_PROBLEM=resnext_g32_c8_56 bash tools/grouped_probe.sh
set -u
FAMILY=${FAMILY:?name the family under test}
PASS=${PASS:-data}
OP=conv_bwd_$PASS
export PYTHONPATH=$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 NCU_OP=$OP
R=/tmp/grouped_probe; mkdir -p "$R" "${OUT:=gpu_out}"
SET=$R/grouped_only.yaml
python3 - "$SET" <<'PY'
import sys, yaml
d = yaml.safe_load(open("configs/problem_sets/grouped_depthwise.yaml"))
d["problems"] = [p for p in d["problems"] if p["G"] > 1 and 1 < max(p["C"], p["K"]) <= 64]
d["name"] = "grouped_only"
yaml.safe_dump(d, open(sys.argv[1], "w"), sort_keys=False)
PY
tests=tests/test_grouped_${TEST_MODULE:-$FAMILY}.py
[[ -f $tests ]] && timeout "${TEST_S:-180}" python3 -m pytest -q -n 8 -p no:cacheprovider "$tests" > "$R/pytest.log" 2>&1
[[ -f $R/pytest.log ]] && tail -1 "$R/pytest.log" | tee "$R/pytest_summary.txt"  # also printed again last
[[ -n ${SKIP_CK:-} ]] || timeout 120 python3 tools/gpu_check.py --ck --ops "$OP" --algorithms "$FAMILY" --out "$R" --tag "ck-$FAMILY" \
  --budget-s 100 2>&1 | tail -1
timeout "${TUNE_S:-240}" python3 -m instance_factory tune "$SET" --quiet --compile-workers 12 --pass "$PASS" \
  --dtype "${DTYPES:-bf16}" --instances "$FAMILY,${VS:-bdtap,blockdiag}" --db "$R/probe.csv" \
  --max-minutes "${TUNE_MIN:-3}" 2>&1 | grep -v '^$' | tail -5
if [[ -n ${NCU_VARIANT:-} ]]; then
  PROB=${NCU_PROBLEM:-resnext_g64_c4_56}
  IFS=';' read -ra VARIANTS <<< "$NCU_VARIANT"  # several variants separated by ';'
  for v in "${VARIANTS[@]}"; do
    timeout "${NCU_S:-120}" bash tools/ncu_one.sh "$R" "$PROB" "$v" "_${FAMILY}|_bd" > /dev/null 2>&1
  done
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Hit|Warp Cycles Per Issued|Registers Per|Achieved Occ|Issue Slots Busy" \
    "$R"/ncu_*.txt | sed "s/.*ncu_${PROB}_//" | cut -c1-150
fi
python3 - "$R/probe.csv" <<'PY'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
d = d[d.status == "ok"]
best = d.loc[d.groupby(["problem_key", "algorithm"]).median_ms.idxmin()]
for key, rows in best.groupby("problem_key"):
    cells = "  ".join(f"{r.algorithm} {r.median_ms:.4f} ({r.cudnn_ms / r.median_ms:.2f}x)" for r in rows.itertuples())
    print(f"{key.split('|')[-1][:60]:60s} cuDNN {rows.cudnn_ms.iloc[0]:.4f}  {cells}")
PY
[[ -f $R/pytest_summary.txt ]] && echo "GPU tests: $(cat "$R/pytest_summary.txt")"
tar -C "$R" -czf "$OUT/probe.tgz" .
