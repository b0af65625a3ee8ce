"""What went wrong with an instance (status, reason, and whether the GPU is left unusable), and the
error that stops a sweep when it is."""

from __future__ import annotations

import torch

from .options import FatalDeviceError

__all__ = ["classify_error", "fatal_error", "finished_rows"]


_FATAL_MARKERS = ("illegal memory access", "illegal instruction", "unspecified launch failure",
                  "misaligned address", "device-side assert", "an illegal", "uncorrectable ECC",
                  "CUDA error: unknown error")


def classify_error(exc: BaseException) -> tuple[str, str, bool]:
    """(status, reason, fatal) for an exception raised by compiling or running an instance."""
    name = type(exc).__name__
    text = f"{name}: {exc}".replace("\n", " ").strip()
    text = " ".join(text.split())[:400]
    mod = type(exc).__module__ or ""
    if name == "OutOfResources" or "out of resource" in text.lower():
        return "oom", text, False
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower():
        return "oom", text, False
    if name in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct") or (
            mod.startswith("triton.compiler")) or "PTXASError" in name or "ptxas" in text.lower():
        return "compile_error", text, False
    fatal = any(m.lower() in text.lower() for m in _FATAL_MARKERS)
    return "failed", text, fatal


def fatal_error(exc: BaseException, rows: dict[str, dict], culprit: str | None = "") -> FatalDeviceError:
    if culprit is None:
        hint = ("it happened while compiling in parallel, so the culprit is unknown: rerun with "
                "--compile-workers 1 (TuneOptions.compile_workers=1) to pin it")
    else:
        hint = "the rows so far are saved; rerun the sweep: it resumes and skips the instance that broke it"
        if culprit:
            hint += f" ({culprit})"
    err = FatalDeviceError(f"the GPU is in an error state after {type(exc).__name__}: {exc}; the process must "
                           f"restart; {hint}")
    err.rows = finished_rows(rows)  # type: ignore[attr-defined]
    return err


def finished_rows(rows: dict[str, dict]) -> list[dict]:
    """The rows worth keeping when a problem is abandoned: not the verified-but-untimed ones (an ok
    row needs a time; a rerun measures them)."""
    return [r for r in rows.values() if not (r["status"] == "ok" and r.get("median_ms") is None)]
