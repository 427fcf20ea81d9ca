"""The trainer's closing words for a person: what was trained, how well, how fast, and where
the exports went; the full figures stay in --metrics-out as JSON."""

from __future__ import annotations

import math
from typing import Any

from ctr.repository.holdout import JUDGED_FROM


def _num(v: Any, digits: int = 4) -> str:
    return "n/a" if not isinstance(v, int | float) or not math.isfinite(v) else f"{v:.{digits}f}"


def summary_text(result: dict[str, Any], export_dir: str | None, exports: list[str], metrics_out: str | None) -> str:
    samples = int(result.get("samples", 0))
    trained = int(result.get("trained_samples", samples))  # this run's; `samples` counts on from a cut taken up
    taken_up = int(result.get("taken_up_samples", 0))
    idle = float(result.get("idle_s", 0.0))
    held = int(result.get("held_out_samples", 0))
    lines = [
        f"trained {trained:,} samples in {result.get('elapsed_s', 0.0):.1f} s ({result.get('examples_per_s', 0.0):,.0f}/s"
        f" on {result.get('device', 'cpu')}"
        + (f", {result['cpu_s']:,.1f} CPU-s" if "cpu_s" in result else "")
        + (
            f"; {result.get('busy_examples_per_s', 0.0):,.0f}/s while data came, idle {idle:,.1f} s)"
            if idle > max(1.0, 0.1 * result.get("elapsed_s", 0.0))
            else ")"
        )
        + (f" on from a checkpoint cut at {taken_up:,}: the stream's samples are {samples:,}" if taken_up else "")
        + (f"; the last {held:,} held out of training, the last export's holdout" if held else "")
        + (
            f" (a model manager's gate needs {JUDGED_FROM:,} at its defaults: too few to judge it)"
            if 0 < held < JUDGED_FROM
            else ""
        ),
        f"  progressive logloss {_num(result.get('progressive_logloss'))}; over the last"
        f" {int(result.get('window_samples', 0)):,}: AUC {_num(result.get('window_auc'))},"
        f" logloss {_num(result.get('window_logloss'))} (scored before each sample was trained)",
    ]
    bad, dropped = int(result.get("bad_lines", 0)), int(result.get("dropped_features", 0))
    if bad or dropped:
        lines.append(f"  {bad:,} bad lines skipped, {dropped:,} features of fields outside the model dropped")
    lost = int(result.get("source_files_lost", 0))
    if lost:  # each was an error in the log, with its name; said again where a person reads the end
        lines.append(
            f"  {lost:,} file(s) of the stream not trained: removed before they were read, or landed late (the log names them)"
        )
    messages, resets = int(result.get("source_messages_lost", 0)), int(result.get("source_partitions_reset", 0))
    if messages:
        lines.append(f"  {messages:,} message(s) of the topic not trained: removed by its retention before they were read")
    if resets:
        lines.append(f"  {resets:,} partition(s) read again from their oldest message: the topic was created again (see the log)")
    differ = int(result.get("mlp_replicas_differ", 0))
    if differ:  # every rank steps alike: a difference is a defect, or ranks on different kinds of device
        lines.append(f"  the ranks' MLPs differed at {differ} progress report(s): the log says where (rank 0 exports its own)")
    per = max(1, trained)
    both = [(k, b["sent"] + b["received"]) for kinds in result.get("wire", {}).values() for k, b in kinds.items()]
    drains = sum(n for k, n in both if k.startswith("drain_"))
    ranks = sum(n for k, n in both if k == "ranks")  # the collectives between ranks (trainer.run.group)
    between = f", between ranks {ranks / per:.1f}" if ranks else ""
    if trained:
        # in-process shards take the same messages, which cross no wire
        where = "PS calls (in process, no wire)" if result.get("ps") == "local" else "wire"
        lines.append(
            f"  {where} {result.get('wire_bytes', 0) / per:.1f} B/sample both ways: PS pushes"
            f" {result.get('push_bytes', 0) / per:.1f} (residual drains {drains / per:.1f}), PS pulls"
            f" {result.get('pull_bytes', 0) / per:.1f}{between}; {int(result.get('sparse_rows', 0)):,} sparse rows"
        )
    else:
        lines.append(
            f"  nothing new in the stream: {int(result.get('wire_bytes', 0)):,} bytes of calls to the PS;"
            f" {int(result.get('sparse_rows', 0)):,} sparse rows"
        )
    if export_dir and exports:
        lines.append(
            f"  {len(exports)} export(s) in {export_dir}, the last {exports[-1]}: a model manager watching it publishes them"
            " (boundless model watch --exports ...)"
        )
    elif export_dir:
        why = "the log says why" if trained else "nothing was trained since the model's last export"
        lines.append(f"  no export written to {export_dir}: {why}")
    else:
        lines.append("  no exports (--export-dir not set): nothing to publish or serve")
    if metrics_out:
        lines.append(f"  every figure as JSON: {metrics_out}")
    return "\n".join(lines)
