"""Progress of a sweep: tqdm when installed, else one line per update with elapsed time and ETA."""

from __future__ import annotations

import math
import sys
import time

__all__ = ["Progress"]


class Progress:
    """tqdm when it is installed, else one line per update on stderr with elapsed time and ETA."""

    def __init__(self, total: int, desc: str = "tuning", enabled: bool = True) -> None:
        self.total, self.n, self.desc, self.enabled = max(total, 0), 0, desc, enabled
        self.t0 = time.monotonic()
        self._bar = None
        self._last = 0.0
        if enabled:
            try:
                from tqdm.auto import tqdm  # optional

                self._bar = tqdm(total=self.total, desc=desc, unit="inst", dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, n: int = 1, note: str = "") -> None:
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if note:
                self._bar.set_postfix_str(note[:60], refresh=False)
            return
        now = time.monotonic()
        if now - self._last < 2.0 and self.n < self.total:
            return
        self._last = now
        el = now - self.t0
        eta = el / self.n * (self.total - self.n) if self.n else float("nan")
        pct = 100.0 * self.n / self.total if self.total else 100.0
        print(f"[{self.desc}] {self.n}/{self.total} ({pct:3.0f}%) elapsed {_hms(el)} eta {_hms(eta)}"
              f"{'  ' + note[:70] if note else ''}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "--:--"
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"

