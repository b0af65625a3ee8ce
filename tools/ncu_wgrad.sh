#!/usr/bin/env bash
# Nsight Compute on the best dwstream variant of the probe and on cuDNN, ConvNeXt stage-1 7x7 depthwise
# bwd weight (bf16): occupancy, stall reasons, memory throughput. Needs the probe's JSON in $1.
RES=$1
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
for prob in convnext_s1_7x7 mnv2_g144_56; do
  V=$(python3 - "$RES/wgrad_probe.json" "$prob" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["problem"] == sys.argv[2] and r.get("family") == "dwstream"
        and r["ms"] is not None and r["err"] is not None and r["err"] <= 1e-2]
b = min(rows, key=lambda r: r["ms"])
print("dwstream:" + json.dumps(b["cfg"], separators=(",", ":")))
PY
)
  echo "== $prob $V"
  ncu --clock-control none $SECTIONS -k regex:_dwstream_kernel --launch-count 1 \
      python3 tools/wgrad_probe.py --once "$prob" "$V" > "$RES/ncu_${prob}_dwstream.txt" 2>&1
  ncu --clock-control none $SECTIONS --launch-count 4 \
      python3 tools/wgrad_probe.py --once-cudnn "$prob" > "$RES/ncu_${prob}_cudnn.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|L1/TEX Hit|Stall|Warp Cycles Per Issued" \
      "$RES/ncu_${prob}_dwstream.txt" "$RES/ncu_${prob}_cudnn.txt" | head -60
done
