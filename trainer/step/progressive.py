"""Progressive (predict-then-train) quality: all-time logloss and windowed AUC/logloss."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.data.quality import EPS, auc, logloss


class ProgressiveMetrics:
    def __init__(self, window: int) -> None:
        self.window = window
        self.labels = np.zeros(window, dtype=np.float32)
        self.probs = np.zeros(window, dtype=np.float32)
        self.filled = 0
        self.pos = 0
        self.count = 0
        self.positives = 0
        self.loss_sum = 0.0

    def update(self, labels: npt.NDArray[np.float32], probs: npt.NDArray[np.float32]) -> None:
        p = np.clip(probs.astype(np.float64), EPS, 1 - EPS)
        self.loss_sum += float(-(labels * np.log(p) + (1 - labels) * np.log(1 - p)).sum())
        self.count += labels.shape[0]
        self.positives += int(labels.sum())
        n = labels.shape[0]
        if n >= self.window:
            self.labels[:] = labels[-self.window :]
            self.probs[:] = probs[-self.window :]
            self.pos, self.filled = 0, self.window
            return
        idx = (self.pos + np.arange(n)) % self.window  # ring buffer; order is irrelevant to AUC
        self.labels[idx] = labels
        self.probs[idx] = probs
        self.pos = (self.pos + n) % self.window
        self.filled = min(self.window, self.filled + n)

    def state(self, last: int | None = None, compact: bool = False) -> dict[str, object]:
        """Everything `merge` needs, picklable (a worker sends it to its coordinator); with
        `last`, only the window's last `last` slots, the part `merge` keeps of each of
        several workers (it crosses the wire at every report). `compact` sends the window
        as a progress line needs it: 0/1 labels a bit each, predictions in float16 (a quarter
        of the bytes; the AUC of a 10k window moves in its 4th decimal at most)."""
        start = 0 if last is None else max(0, self.filled - last)
        labels, probs = self.labels[start : self.filled], self.probs[start : self.filled]
        out: dict[str, object] = {"count": self.count, "positives": self.positives, "loss_sum": self.loss_sum}
        out["probs"] = probs.astype(np.float16) if compact else probs.copy()
        if compact and bool(np.all((labels == 0) | (labels == 1))):  # soft labels travel whole
            out["label_bits"] = (np.packbits(labels == 1), labels.shape[0])
        else:
            out["labels"] = labels.copy()
        return out

    @staticmethod
    def _window_of(st: dict[str, object]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        probs = np.asarray(st["probs"]).astype(np.float32)
        if "label_bits" in st:
            packed: tuple[npt.NDArray[np.uint8], int] = st["label_bits"]  # type: ignore[assignment]
            return np.unpackbits(packed[0], count=packed[1]).astype(np.float32), probs
        return np.asarray(st["labels"], dtype=np.float32), probs

    @classmethod
    def merge(cls, window: int, states: list[dict[str, object]]) -> ProgressiveMetrics:
        """Several workers' metrics as one: sums add up, the window holds each one's recent
        predictions (up to `window` in all, in equal shares)."""
        out = cls(window)
        share = window // max(1, len(states))
        for st in states:
            out.count += int(st["count"])  # type: ignore[call-overload]
            out.positives += int(st["positives"])  # type: ignore[call-overload]
            out.loss_sum += float(st["loss_sum"])  # type: ignore[arg-type]
            labels, probs = cls._window_of(st)
            labels, probs = (labels[-share:], probs[-share:]) if share else (labels[:0], probs[:0])
            n = labels.shape[0]
            out.labels[out.filled : out.filled + n] = labels
            out.probs[out.filled : out.filled + n] = probs
            out.filled += n
        out.pos = out.filled % window
        return out

    def snapshot(self) -> dict[str, float]:
        lab, prob = self.labels[: self.filled], self.probs[: self.filled]
        return {
            "samples": float(self.count),
            "positives": float(self.positives),
            "progressive_logloss": self.loss_sum / self.count if self.count else float("nan"),
            "window_samples": float(self.filled),
            "window_auc": auc(lab, prob),
            "window_logloss": logloss(lab, prob),
        }
