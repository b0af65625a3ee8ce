"""The cost model's constants (:mod:`.cost_model`), each with the measurement that set it.

H100/H200-class values; the neighbour correction absorbs what a constant misses on a given GPU.
"""

import math

# ---- the model's constants (H100/H200 class; the neighbour correction absorbs the rest) ------
#: dense tensor-core rate per compute type, FLOP/s (~790 T measured for bf16 matmul, ARCHITECTURE.md)
PEAK_FLOPS = {"fp16": 700e12, "bf16": 700e12, "fp8": 1200e12, "tf32": 350e12, "fp32": 50e12}
CUDA_CORE_FLOPS = 50e12  # algorithms without tensor-core tiles (direct, depthwise)
MEM_BW = 3.0e12  # bytes/s (an H100; an H200 has ~4.3: a constant factor the correction absorbs)
# relayout's copies when the evidence holds no relayout row beside its twin's (Evidence.copy_bw fits it per
# device): the H100 file's 860 relayout rows ran at their twin's tuned best plus their copy bytes at a
# median 2.2-2.6 TB/s per class (session 36).
COPY_BW = 2.5e12
# dwplane's loads: the vector width (elements) from which its tile loads run at full rate; narrower
# vectors cost proportionally more (session 37, H100: G480 14x14 at 2-wide vectors and G960 7x7 at 1-wide
# ran at 2.5x and 5x the L2 time of their tiles, 56-wide planes at 1.3-1.4x)
PLANE_FULL_VECTOR = 4
# The packed block-diagonal dgrad kernels (blockdiag, bdtap, bdroll) on channels-first activations (NGC..):
# each tile gathers its few channels from planes H*W elements apart, so dx and dy move at ~450 GB/s, not
# MEM_BW. Session 40, H100, NGCHW grouped dgrad, blockdiag m256_n32_w8: 2 x 103 MB (dx + dy) ran 0.42 ms,
# 2 x 19 MB 0.075, 2 x 12 MB 0.052 (460-515 GB/s); with MEM_BW the model sat at its floor (0.010-0.017 ms)
# under all of them, so the neighbours' corrections grew with their size (log +0.6 at 6 MB .. +2.3 at
# 200 MB) and priced the held-out RegNetY-1.6GF C24 layers (N32, 2.8-6 MB) up to 4.8x over their 0.018-0.029
# ms: relayout won there at 0.60-0.61 of the tuned best. With the term the rows' log residuals span -0.17..+0.38;
# leave-one-out (layer hidden) 0.9285 -> 0.9307, channels-first grouped dgrad 0.874 -> 0.912, group-major 0.857
# -> 0.867 (their mean correction), every other group unchanged; the held-out NGCHW G37 pick 0.60 -> 0.83.
PLANAR_PACKED_BW = 450e9
L2_BW = 8.0e12  # operand reads: a tile reads (block_m + block_n) x its reduction (many on small tiles)
DEFAULT_SMS, MAX_SPLIT = 132, 64

# Host time a call costs beyond the usual launch, where it exceeds small layers' GPU time. tma built two
# TMA descriptors a call: 60.5 us vs ~34 for igemm (session 10, H100), host-bound below ~0.03 ms;
# pointwise dgrad builds the same two. Since the runner copies descriptor templates, the bwd-weight
# families that build them cost no more than igemm: tma 39.0 us, igemm 44.3, pointwise 43.8 (session
# 23, H100), so tma, shift and rowstack wgrad lost their floor in session 28: `db evaluate --hide
# layer` H100 0.9378 -> 0.9380, H200 0.9028 -> 0.9040; the held-out layers whose new default had been
# timed in session 27: skinny 1x1 wgrad 0.736 -> 0.766 of the tuned best, dense 3x3 0.925 -> 0.934.
# Session 31: bwd-data tma and pointwise copy templates the same way and lost theirs too (0.03 ms; it
# kept small strided shortcuts on igemm, e.g. RegNetY's held-out 336->888 at 0.75 of its tuned best):
# data dense H100 0.962 -> 0.963 (after re-timing a disturbed 0.42 ms tma row that it exposed), H200
# 0.941 -> 0.947.
HOST_COST_MS: dict[tuple[str, str], float] = {}

# Kernel launches per call of the bwd-weight GEMM families. A family's measured floor (its fastest
# row) says how small its evidence went, not what one call costs: igemm (one launch) is only ever
# measured on large layers, so its floor (~0.033 ms on the H100) sat above splitk_reduce's (two
# launches, ~0.020) and tiny layers went to the two-launch family. The floor of a family listed here
# is at most ONE_LAUNCH x (1 + EXTRA_LAUNCH x (launches - 1)), ONE_LAUNCH being the lowest floor of
# the one-launch families measured (bwd-data igemm: ~0.0125 ms); the H100's measured floors of 2
# and 3 launches (0.020, 0.023-0.027) fit EXTRA_LAUNCH = 0.6. bdrow (kernel + reduce) is listed since
# session 13: measured only on layers of 0.023 ms and more, its floor of 0.030 hid its tile model.
# The block-diagonal dgrad families (one launch each) since session 29: floors 0.016-0.020 from their
# smallest layers. `db evaluate --hide layer`: H100 0.947 -> 0.949 (grouped dgrad 0.925 -> 0.945), H200
# 0.927 -> 0.928. Listing direct (one launch) and dwtaps / dwroll (table + kernel) too lowered depthwise
# dgrad (H100 0.938 -> 0.931-0.932, a 0.26 case) and moved Conformer's held-out 1D depthwise default off
# its measured tuned best.
# dwplane wgrad since session 40 (one launch where its blocks fit one chunk, else kernel + split reduce; its
# fewest is one): its measured floor (0.023 ms, H100) is its smallest evidence layers (G960 5x5 7x7, real
# work), above the roofline of the 14x14 / 7x7 planes it now wins (0.010-0.014 ms), so the floor blend doubled
# their model before the neighbours' corrections (taken where the model was above the floor) multiplied it
# again: G480 3x3 14x14 predicted 0.059 ms, measured 0.024. `db evaluate --hide layer`-style leave-one-out,
# H100 file: 0.9194 -> 0.9232 (below 0.5x 28 -> 25); channels-first depthwise wgrad 0.808 -> 0.842,
# group-major 0.608 -> 0.763 (listed as two launches: 0.9208, 0.828, 0.644).
# dwplane dgrad likewise (one launch; its block table is built once per bind): with session 40's run blocks its
# 14x14 / 7x7 layers run 0.020-0.025 ms, near its floor, and were priced 2x over (G480 3x3 14x14 group-major:
# 0.041 predicted, 0.020 measured; dwroll picked at 0.063). Leave-one-out 0.9269 -> 0.9285 (below 0.5x 24 -> 22);
# channels-first depthwise dgrad 0.893 -> 0.910, group-major 0.694 -> 0.747.
# dwtile dgrad likewise (one launch, session 51): its measured floor (0.021 ms H200, 0.018 H100) is the real
# work of the smallest layers of its set, so on the held-out 12-channel 1x11 56x56 layer (measured 0.012 ms) the
# floor priced it at 0.022 and direct (0.039 measured) was served at 0.31 of it. Held-out depthwise dgrad replayed
# (tools/heldout_replay.py): H200 session 46 / 47 rows 0.751 / 0.767 -> 0.861 / 0.907 (worst 0.32 -> 0.59), H100
# 0.869 / 0.907 -> 0.869 / 0.915; measured again on the H200: 0.742 / 0.751 -> 0.901 / 0.895 (fp16 / bf16); `--hide
# layer` depthwise dgrad H200 0.919 -> 0.921, H100 0.909 -> 0.907.
# The bwd-weight pointer GEMMs have no channel-alignment constexpr (bwd-data igemm has one since
# session 9): with C, K, G*C or G*K not a multiple of 16 their channel loads are one element wide.
# Session 13 (H100, held-out RegNetY G14 / G37, C = K = 24): they ran 2-3x slower than bdrow while
# on the aligned G32 C32 neighbours they beat it, so the model doubles their time on such grouped
# layers. Grouped only: applied to dense layers too, the leave-one-out geomean fell 0.922 -> 0.919.
POINTER_GEMMS = ("igemm", "splitk_atomic", "splitk_reduce", "two_stage")
UNALIGNED_FACTOR = 2.0
# ``direct`` (both passes) on channels-last layers whose position stride G*C / G*K is over 16 without a
# divisor of 16 (roofline._unaligned_channel_stride). Session 42, held-out rows and the H100 file's G = 72
# layers: dgrad 2.3-3.5x the best where aligned layers run it as the median best. Leave-one-out (layer hidden)
# 2 and 3 alike (H100 0.9308, H200 0.9373); on the H100's held-out channels-last depthwise dgrad 3 lifts fp16
# 0.80 -> 0.89 (Xception's G728 19x19 layer: direct at 0.117 ms over dwtaps at 0.038 under 2).
DIRECT_UNALIGNED_FACTOR = 3.0

LAUNCHES = {("conv_bwd_weight", "igemm"): 1, ("conv_bwd_weight", "splitk_reduce"): 2,
            ("conv_bwd_weight", "two_stage"): 2, ("conv_bwd_weight", "splitk_atomic"): 3,
            ("conv_bwd_weight", "padx"): 3, ("conv_bwd_weight", "padvec"): 3, ("conv_bwd_weight", "tma"): 2,
            ("conv_bwd_data", "igemm"): 1,
            ("conv_bwd_data", "tma"): 1, ("conv_bwd_data", "pointwise"): 1, ("conv_bwd_weight", "bdrow"): 2,
            ("conv_bwd_weight", "bdwin"): 2, ("conv_bwd_weight", "pointwise"): 1,
            ("conv_bwd_weight", "shift"): 2, ("conv_bwd_weight", "rowstack"): 2, ("conv_bwd_weight", "relayout"): 4,
            ("conv_bwd_weight", "tapshare"): 2, ("conv_bwd_weight", "bdring"): 2,
            ("conv_bwd_weight", "bdstride"): 2,
            ("conv_bwd_data", "cfirst"): 1, ("conv_bwd_data", "relayout"): 3,
            ("conv_bwd_data", "blockdiag"): 1, ("conv_bwd_data", "bdtap"): 1,
            ("conv_bwd_data", "bdroll"): 1, ("conv_bwd_weight", "dwplane"): 1, ("conv_bwd_data", "dwplane"): 1,
            ("conv_bwd_data", "dwtile"): 1}
EXTRA_LAUNCH = 0.6

# A family's floor (its fastest measured call) and the work of the call blend as (work^q + floor^q)^(1/q)
# instead of max(work, floor): under the floor a max hid the padded work of tiles far wider than the
# layer's channels (the held-out RegNetY G37 C24 dgrad: igemm 128x128, 0.023 ms, vs blockdiag 128x32, 0.016;
# DenseNet's K32 growth layer: 128x256, 0.028 ms, vs 64x128, 0.0124). Session 29, `db evaluate --hide
# layer` with q = max / 6 / 4 / 3 / 2: H100 0.942 / 0.945 / 0.946 / 0.947 / 0.948, H200 0.926 / 0.927 /
# 0.928 / 0.927 / 0.923; below 0.5x at q = 3: 8 -> 6 (H100), 13 -> 12 (H200). Since session 45 a
# neighbour's correction is the measured work above the floor over the modelled work, and it scales the
# work before the blend (roofline.work_correction): before, it scaled the blend, so a kernel 3x off
# the roofline on large layers was priced at 3x its floor on tiny ones (a 16-channel 8x8 wgrad served
# padvec's two launches, igemm's one launch priced 0.125 ms). Kernels priced by FLOPs alone keep the
# whole-call rule (roofline.work_modelled). `--hide layer`: H100 0.926 -> 0.930 (below 0.5x 29 -> 19), H200
# 0.936 -> 0.938 (6 -> 8); the fresh held-out sets replayed (six runs, both GPUs): 0.82-0.90 -> 0.86-0.93.
FLOOR_BLEND_POWER = 3.0

# A GEMM grid of at most one program per SM runs each SM below its share of the peak: one CTA cannot
# hide its own load latency (H200, ResNet-50's 1024x512 1x1 stride-2 wgrad at N64: igemm's 64 tiles
# without a split at 2.5x the model, where the 256-tile layers it was corrected on ran at 1.0x).
# Session 28, `db evaluate --hide layer` with the other GPU's rows over 0.5 / 0.6 / 0.7 / 0.75 / 0.8 /
# 1.0: H200 0.926 / 0.927 / 0.928 / 0.927 / 0.926 / 0.924, H100 0.938 / 0.940 / 0.941 / 0.941 / 0.942 /
# 0.940; below 0.5x at 0.75: 8 -> 6 (H200), 10 -> 8 (H100).
ONE_CTA_EFFICIENCY = 0.75

# A pruned row is one run, stored as a bound. 87 of the H100 file's pruned fp16/bf16 rows took over 5x
# (up to 8,000x: a compile inside the run) the same kernel's full timing on the sibling dtype's problem;
# as evidence they marked good kernels as failures (session 28). Past this factor the sibling's timing
# stands for such a row (`cost_model.repair_disturbed`). Session 30: the same holds for fully timed (ok)
# rows, e.g. the H100's fp16 depthwise dgrad direct `p64_ch64` at 0.123 ms (30 reps) where its bf16 twin
# ran 0.036 (472 reps): as a served time in leave-one-out it made a 0.26 miss (487 of the H100 file's 73,053
# ok fp16/bf16 rows are over 2x their twin; none of the H200's). Repairing ok rows too,
# `db evaluate --hide layer`: H100 0.944 -> 0.945 (below 0.5x 6 -> 5), H200 0.930 -> 0.930.
DISTURBED_SIBLING_FACTOR = 2.0
# `db suspects` also lists an ok row over this factor x the median of its kernel family's ok rows on the
# same problem (families of FAMILY_OUTLIER_MIN_ROWS rows or more): a slow config or a disturbed run, which
# only a second timing tells apart. Session 31 re-timed the H100 file's 254 such rows: 62 had been
# disturbed (e.g. a tma dgrad config at 0.42 ms, 0.017 when timed again), 176 were within 25% of
# their first time.
FAMILY_OUTLIER_FACTOR, FAMILY_OUTLIER_MIN_ROWS = 4.0, 4

TAPS_IN_COLUMNS = ("two_stage", "padx", "padvec")  # bwd-weight algorithms whose GEMM columns are (tap, c): N = C * taps

# ---- neighbour search -----------------------------------------------------------------------
# aspect (session 44): log2 of the filter's longest side over its shortest, weighted like the taps. With the
# large_kernel_depthwise rows, a SegNeXt 1x7 band was Xception's 3x3 wgrad's nearest problem and priced a
# row-sliding kernel there at 0.10 of the best; with the feature, leave-one-out (H100 file, layer hidden) over
# the problems of session 43: 0.9302 -> 0.9310, below 0.5x 21 -> 19; H200 file 0.9359 -> 0.9359.
# orient (session 49): a one-wide band's W side over its H side (problem_distance._orientation). Without it a 1x21
# band took its 21x1 twin's picks (NGCHW wgrad two_stage at 0.24 of relayout). H100 leave-one-out, layer
# hidden: 0.927 -> 0.930, depthwise wgrad 0.847 -> 0.875, below 0.5x 22 -> 14 (weights 2 and 4 alike; 1
# 0.930; on every filter, not only one-wide bands: 0.926, 51x5 bands losing their 5x51 twins).
FEATURE_WEIGHTS = {"M": 1.0, "N": 1.0, "K": 1.0, "taps": 2.0, "stride": 2.0, "C": 0.5, "Kc": 0.5,
                   "G": 0.5, "aspect": 2.0, "orient": 2.0}
CLASS_PENALTY = 6.0  # dense vs grouped vs depthwise: different kernels win
# grouped layers whose channel counts have a divisor of 16 or not (roofline.unaligned_groups): the pointer GEMMs'
# channel loads fall to one element, tapshare runs only the latter (session 50: RegNet's 40 / 56-channel groups,
# where bdwin beat the pointer GEMMs, had become the nearest neighbours of ResNeXt's 32 / 64-channel ones and
# moved their picks to bdwin, 0.53-0.65 of the tuned best)
ALIGN_PENALTY = 1.5
DTYPE_PENALTY = {"same": 0.0, "sibling": 0.25, "same_size": 1.5, "other": 3.0}
SIBLING_DTYPES = ({"fp16", "bf16"}, {"fp32", "fp32_tf32"}, {"bf16", "bf16_fp32w"}, {"fp16", "fp16_fp8"})
LAYOUT_PENALTY = 1.5  # channels-last vs channels-first layout families
FUSED_PENALTY = 0.5
DEVICE_PENALTY = 1.0  # a row measured on another GPU kind (used where this device has none closer)
# 1D / 2D / 3D apart: a layer's dimensionality decides how the kernels walk it (rows, planes), but the
# features (GEMM sizes, taps) left the 1-D Conformer k31 layer the nearest neighbour of a 2-D 7x7
# depthwise one, whose default became dwstream at 0.39 of dwslab. `db evaluate --hide layer` (H100,
# 1,359 problems) over the penalty: 0 0.920, 0.25 0.921, 0.5 0.924, 0.75 0.923, 1 0.923, 2 0.920;
# at 0.5 weight depthwise 0.869 -> 0.902, below 0.5x 20 -> 16, hiding one problem unchanged (0.963).
NDIM_PENALTY = 0.5
NEIGHBORS_PER_KERNEL = 3
NEAREST_PROBLEMS = 6  # the per-algorithm / global fallbacks average over these
FAILED_FACTOR = 20.0  # a kernel that failed on a neighbour counts as this many times its best
NOISY_SPREAD = 2.0  # kernel_ms: a row with p80 > this x p20 was disturbed; its p20 stands for it
# log-time added per unit distance to the nearest evidence of a kernel. Session 36 (with relayout priced
# through its twin and MAX_EVIDENCE_DISTANCE), leave-one-out with the layer hidden, penalty 0.05 / 0.1 /
# 0.15 / 0.2 / 0.3: H100 0.9351 / 0.9353 / 0.9361 / 0.9351 / 0.9314, H200 0.9347 / 0.9378 / 0.9373 / - / -
# (below 0.5x: H100 15 -> 14, H200 9 -> 7); group-major depthwise dgrad 0.81 -> 0.91. A kernel priced from
# layers 3+ away no longer outranks the ones the same layer's other dtype measured (group-major
# ConvNeXt 7x7 dgrad: bdtap from 3.4 away at 0.11 ms predicted, 0.28 measured, over dwtaps at 0.116).
# Session 42: a kernel priced by its family's correction or by the neighbours' mean pays it too, from the
# nearest neighbour whose rows price it (they are no closer than a measured kernel's). Held out: RegNetY's G37
# C24 7x7 dgrad (GNHWC) took bdroll, measured nowhere near, at 0.31 of the best over bdtap / blockdiag measured
# 2.9 away (session 40's rows: group-major grouped dgrad 0.70 -> 0.80 / 0.88, bf16 / fp16); SlowFast's C8
# 3x1x1 dgrad took direct, never measured on a dense layer, at 0.15 (fresh H200 rows: dense dgrad 0.72 ->
# 0.89). Leave-one-out with the layer hidden H100 0.9307 -> 0.9308 (below 0.5x: 22 -> 21), H200 0.9373 -> 0.9371.
DISTANCE_PENALTY = 0.15
# A kernel's own rows count only from neighbours this close; beyond, its family's correction stands in.
# Another conv class is 6 away before any feature: ResNeXt-101 32x8d's group-major C8 wgrad had two_stage
# predicted at 0.29 ms from dense rows at distance 12 (it runs 1.6 ms; relayout 0.35). Session 36,
# leave-one-out with the layer hidden over the H100 file: no limit 0.9332, 6.5 0.9343, 8 / 9 / 11
# 0.9351 (below 0.5x 16 -> 15; group-major grouped wgrad 0.858 -> 0.903).
MAX_EVIDENCE_DISTANCE = 9.0
# neighbour weights fall as distance^-3: the same layer at another batch size (distance ~1) must
# outvote layers of another network (~2). Leave-one-out over the H100 rows (db evaluate): power 1
# 0.862, 2 0.878, 3 0.882 of the tuned best (dense wgrad 0.816 -> 0.844, grouped dgrad 0.964 -> 0.998);
# H200 rows 0.908 -> 0.910; exp(-2d) 0.880. Power 1 served RegNetY G5 C24 wgrad splitk at 0.49x.
WEIGHT_POWER = 3
UNSEEN_KERNEL = math.log(1.3)  # a kernel no neighbour measured, its algorithm measured
UNSEEN_ALGORITHM = math.log(1.6)  # an algorithm no neighbour measured
