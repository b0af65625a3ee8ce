#!/usr/bin/env bash
# Nsight Compute on one probe variant and on cuDNN for one wgrad_probe problem: occupancy, stall
# reasons, memory throughput, instruction mix.
#   bash tools/ncu_one.sh RESULT_DIR PROBLEM 'family:{json cfg}' KERNEL_REGEX   (NCU_OP=conv_bwd_data for dgrad)
RES=$1 PROB=$2 VAR=$3 KRE=$4
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
OPT=${NCU_OP:-conv_bwd_weight}; OPT=${OPT#conv_bwd_}
TAG=${OPT}_$(echo "$VAR" | tr -c 'a-zA-Z0-9' '_' | cut -c1-60)
ncu --clock-control none $SECTIONS -k "regex:$KRE" --launch-count 1 \
    python3 tools/wgrad_probe.py --op "${NCU_OP:-conv_bwd_weight}" --once "$PROB" "$VAR" > "$RES/ncu_${PROB}_${TAG}.txt" 2>&1
[[ -f "$RES/ncu_${PROB}_${OPT}_cudnn.txt" ]] || ncu --clock-control none $SECTIONS --launch-count 3 -k regex:"^(?!.*(distribution|elementwise)).*" \
    python3 tools/wgrad_probe.py --op "${NCU_OP:-conv_bwd_weight}" --once-cudnn "$PROB" > "$RES/ncu_${PROB}_${OPT}_cudnn.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|L1/TEX Hit|L2 Hit|Stall|Warp Cycles Per Issued|Block Limit" \
    "$RES/ncu_${PROB}_${TAG}.txt" "$RES/ncu_${PROB}_${OPT}_cudnn.txt" | cut -c1-160 | head -90
