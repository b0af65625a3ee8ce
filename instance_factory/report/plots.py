"""Matplotlib plots for the HTML report, returned as base64 PNG (embedded: no network needed)."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

import pandas as pd

from ..dtypes import DATA_TYPES
from ..epilogue import FUSED_OPS
from ..problem import ConvParams

__all__ = ["DevicePeaks", "device_peaks", "roofline_png", "speedup_png"]


@dataclass(frozen=True)
class DevicePeaks:
    """Dense (no sparsity) peaks from NVIDIA's data sheets: TFLOP/s per compute mode, memory TB/s."""

    name: str
    tflops: dict[str, float]  # compute mode (DataType.compute) -> TFLOP/s
    tbps: float


_PEAKS: tuple[tuple[tuple[str, ...], DevicePeaks], ...] = (
    (("H200",), DevicePeaks("H200 SXM", {"ieee": 66.9, "tf32": 494.7, "native": 989.4, "fp8": 1978.9}, 4.8)),
    (("H100", "PCIE"), DevicePeaks("H100 PCIe", {"ieee": 51.2, "tf32": 378.0, "native": 756.0, "fp8": 1513.0}, 2.0)),
    (("H100", "NVL"), DevicePeaks("H100 NVL", {"ieee": 60.0, "tf32": 417.5, "native": 835.0, "fp8": 1670.0}, 3.9)),
    (("H100",), DevicePeaks("H100 SXM", {"ieee": 66.9, "tf32": 494.7, "native": 989.4, "fp8": 1978.9}, 3.35)),
    (("A100", "80GB"), DevicePeaks("A100 80GB", {"ieee": 19.5, "tf32": 156.0, "native": 312.0}, 2.039)),
    (("A100",), DevicePeaks("A100 40GB", {"ieee": 19.5, "tf32": 156.0, "native": 312.0}, 1.555)),
)


def device_peaks(device: str) -> DevicePeaks | None:
    up = device.upper()
    for keys, peaks in _PEAKS:
        if all(k in up for k in keys):
            return peaks
    return None


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _log_axis(axis, fmt) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def speedup_png(best: pd.DataFrame, sets: dict[str, list[str]]) -> str:
    """Best instance per problem: speedup vs cuDNN, one column of points per problem set (colour: op), per device.

    ``best``: rows with device, op, problem_key, speedup_vs_cudnn; ``sets``: ConvParams key -> set names.
    """
    plt = _plt()
    df = best[best["speedup_vs_cudnn"].notna() & (best["speedup_vs_cudnn"] > 0)]
    devices = sorted(df["device"].unique())
    ops = sorted(df["op"].unique())
    colours = {op: f"C{i}" for i, op in enumerate(ops)}
    fig, axes = plt.subplots(len(devices), 1, figsize=(9, 3.4 * len(devices)), squeeze=False)
    for ax, dev in zip(axes[:, 0], devices):
        d = df[df["device"] == dev]
        groups: dict[str, list[tuple[str, float]]] = {}
        for op, key, sp in zip(d["op"], d["problem_key"], d["speedup_vs_cudnn"]):
            for name in sets.get(key.split("|")[4]) or ["(no problem set)"]:
                groups.setdefault(name, []).append((op, float(sp)))
        names = sorted(groups)
        for i, name in enumerate(names):
            vals = groups[name]
            for j, op in enumerate(ops):
                ys = [v for o, v in vals if o == op]
                xs = [i + (j - (len(ops) - 1) / 2) * 0.3 + 0.1 * ((k % 5) - 2) / 2 for k in range(len(ys))]
                ax.scatter(xs, ys, s=16, alpha=0.75, color=colours[op], label=op if i == 0 else None)
            gm = math.exp(sum(math.log(v) for _, v in vals) / len(vals))
            ax.hlines(gm, i - 0.4, i + 0.4, colors="black", linewidth=2)
            ax.annotate(f"{gm:.2f}×", (i + 0.42, gm), fontsize=8, va="center")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        _log_axis(ax.yaxis, lambda v: f"{v:g}×")
        ax.set_xlim(-0.6, len(names) - 0.4 + 0.3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([f"{n}\n({len(groups[n])} problems)" for n in names], fontsize=8)
        ax.set_ylabel("speedup vs cuDNN")
        ax.set_title(f"{dev}: best instance per problem (bar: geometric mean; > 1 is faster than cuDNN)", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    return _png(fig)


def _intensity(row) -> float:
    p = ConvParams.from_key(row["problem_key"].split("|")[4])
    dt = DATA_TYPES[row["dtype"]]
    eb = dt.data.itemsize
    rb = dt.result.itemsize if dt.result is not None else None
    n_ds = FUSED_OPS[row["fused_op"]].min_ds if row["fused_op"] in FUSED_OPS else 0
    return p.flops() / p.bytes_moved(row["op"], eb, n_ds, rb)


def roofline_png(best: pd.DataFrame) -> tuple[str, list[str]]:
    """TFLOP/s vs arithmetic intensity (FLOP per byte of the fewest bytes each op must move), with the
    device's roofline per compute mode when its peaks are known. Returns (png, notes)."""
    plt = _plt()
    df = best[best["tflops_eff"].notna() & (best["tflops_eff"] > 0)].copy()
    notes = []
    devices = sorted(df["device"].unique())
    fig, axes = plt.subplots(len(devices), 1, figsize=(9, 4.2 * len(devices)), squeeze=False)
    for ax, dev in zip(axes[:, 0], devices):
        d = df[df["device"] == dev].copy()
        d["ai"] = d.apply(_intensity, axis=1)
        for (op, dt), g in d.groupby(["op", "dtype"]):
            ax.scatter(g["ai"], g["tflops_eff"], s=16, alpha=0.75, label=f"{op[5:]} {dt}")
        peaks = device_peaks(dev)
        lo, hi = max(d["ai"].min() / 2, 0.1), d["ai"].max() * 2
        if peaks is None:
            notes.append(f"no peak figures known for {dev}: its plot has no roofline")
        else:
            modes = [m for m in ("ieee", "tf32", "native", "fp8") if m in peaks.tflops
                     and any(DATA_TYPES[x].compute == m for x in d["dtype"].unique())]
            n = 64
            xs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
            for m in modes:
                ax.plot(xs, [min(peaks.tflops[m], x * peaks.tbps) for x in xs], linewidth=1,
                        label=f"roofline {m} ({peaks.tflops[m]:.0f} TF/s, {peaks.tbps} TB/s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_axis(ax.xaxis, lambda v: f"{v:g}")
        _log_axis(ax.yaxis, lambda v: f"{v:g}")
        ax.set_xlabel("arithmetic intensity (FLOP / byte)")
        ax.set_ylabel("TFLOP/s (best instance)")
        ax.set_title(f"{dev}" + (f" (peaks: {peaks.name})" if peaks else ""), fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    return _png(fig), notes
