"""The training loop on real files, in-process: format detection and resuming inside a CSV."""

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from ctr.data.fields import FieldIndex
from ctr.data.schema import PRESETS
from ctr.model.spec import ModelSpec
from ps.client import PSClient
from trainer.input.source import Position, StreamSource
from trainer.run.loop import LoopSettings, Trainer, replicas_verdict
from trainer.step.factorization import build_model
from trainer.step.progressive import ProgressiveMetrics


@pytest.mark.slow
def test_a_bad_first_line_on_stdin_does_not_stop_format_detection(tmp_path, data_dir):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:500]
    stdin = "garbage that is no format\n" + "\n".join(lines) + "\n"
    out = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", "-", "--no-follow", "--metrics-port", "-1"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out)], input=stdin, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["samples"] == 500 and result["bad_lines"] == 1
    assert "<stdin>:1: format not detected yet" in proc.stderr


def test_resuming_inside_a_csv_file_keeps_its_header(tmp_path, data_dir):
    text = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text()
    path = tmp_path / "avazu.csv"
    path.write_text(text)
    header_and_first = text.split("\n", 2)
    offset = len(header_and_first[0]) + 1 + len(header_and_first[1]) + 1  # after line 2
    schema = PRESETS["avazu"]
    fields = FieldIndex(schema.base_fields(header_and_first[0]), frozen=True)
    client = PSClient.local()
    model = build_model(ModelSpec("lr", fields=tuple(fields.names)))
    model.prepare(client)
    source = StreamSource(str(path), follow=False, start=Position(str(path), offset, 2))
    settings = LoopSettings(batch_size=256, max_samples=None, idle_exit_s=0, export_interval_s=1e9, checkpoint_interval_s=0)
    trainer = Trainer(client, model, schema, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    result = trainer.run()
    assert trainer.bad_lines == 0 and result["samples"] == 9999 - 1


def test_a_sample_limit_trains_exactly_that_many_and_stops_after_the_last_line_it_trained(tmp_path, data_dir):
    """--max-samples 300 at a batch of 256 trained 512 (the batch that crossed it): now the
    last batch stops at the limit, bad lines not counted, and the position is the line
    after the 300th sample, so a run taken up there trains the rest exactly once."""
    lines = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()
    lines[100] = lines[100].replace(",", ";")  # one bad line inside the first 300 samples
    path = tmp_path / "avazu.csv"
    path.write_text("\n".join(lines[:1001]) + "\n")
    schema = PRESETS["avazu"]
    fields = FieldIndex(schema.base_fields(lines[0]), frozen=True)
    model = build_model(ModelSpec("lr", fields=tuple(fields.names)))
    client = PSClient.local()
    model.prepare(client)
    settings = LoopSettings(batch_size=256, max_samples=300, idle_exit_s=0, export_interval_s=1e9, checkpoint_interval_s=0)
    source = StreamSource(str(path), follow=False)
    trainer = Trainer(client, model, schema, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    result = trainer.run()
    assert result["samples"] == 300 and trainer.bad_lines == 1
    # the header, 300 samples and the bad line: the position is after line 302
    assert trainer.position.line == 302 and trainer.position.offset == sum(len(x) + 1 for x in lines[:302])
    # read on to the end of a file without a final newline, the limit reached: its last
    # block, held back, came back to the same cut again and again (a RecursionError)
    from trainer.input.reader import BatchReader

    path.write_text("\n".join(lines[:1001]))
    for batch_size in (64, 16384):
        reader = BatchReader(StreamSource(str(path), follow=False), schema, fields, batch_size, 1 << 20)
        reader.sample_limit = 300
        assert sum(len(r.batch) for r in reader.batches() if r is not None) == 300
    reader = BatchReader(StreamSource(str(path), follow=False), schema, fields, 64, 1 << 20)
    reader.sample_limit = 0  # a run taken up at or past its limit reads nothing
    assert sum(len(r.batch) for r in reader.batches() if r is not None) == 0


@pytest.mark.slow
def test_large_feature_values_train_without_refused_pushes(tmp_path):
    """Per-example FTRL on values of 500: a hot key's n grows by ~1e7 a batch, far above the
    gradients' max_abs; the deltas must be accepted (they keep the state finite)."""
    rng = __import__("numpy").random.default_rng(0)
    lines = [f"{int(rng.random() < 0.3)} 1:500 {rng.integers(2, 50)}:{rng.integers(1, 500)}" for _ in range(3000)]
    path = tmp_path / "counts.libsvm"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(path), "--no-follow", "--metrics-port", "-1"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["samples"] == 3000


def test_the_trainer_goes_back_to_the_newest_cut_every_shard_holds(caplog):
    from ctr.runtime.config import ConfigError
    from ps.api import ShardStatus
    from trainer.run.recovery import common_cut

    def status(index: int, committed: int, cuts: tuple[int, ...]) -> ShardStatus:
        return ShardStatus(index, 2, 0, 0, b"", [], 1, 0, committed, cuts)

    assert common_cut([status(0, 0, ()), status(1, 0, ())]) == 0  # nothing stored: from the start
    assert common_cut([status(0, 5, (3, 4, 5)), status(1, 5, (4, 5))]) == 5
    with caplog.at_level("WARNING", logger="trainer"):
        assert common_cut([status(0, 6, (4, 5, 6)), status(1, 5, (4, 5))]) == 5  # shard 1 missed cut 6
    assert "going back to cut 5" in caplog.text
    with pytest.raises(ConfigError, match=r"shard\(s\) 1 hold no checkpoint cut while the others do"):
        common_cut([status(0, 6, (6,)), status(1, 0, ())])  # shard 1 lost its data


def test_a_folder_resumed_at_its_second_file_never_reads_the_first_again(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text("1 x\n0 y\n")
    source = StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "b.txt"), 4, 1))
    read = [(b.file, b.data) for b in source.blocks(1 << 20) if b is not None and b.data]
    assert read == [(str(tmp_path / "b.txt"), b"0 y\n"), (str(tmp_path / "c.txt"), b"1 x\n0 y\n")]


@pytest.mark.slow
def test_in_process_shards_take_the_row_lifecycle_from_the_trainer(tmp_path, data_dir):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:5000]
    (tmp_path / "s.libfm").write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.json"
    base = [sys.executable, "-m", "boundless", "train", "--source", str(tmp_path / "s.libfm"), "--no-follow"]
    base += ["--metrics-port", "-1", "--ps", "local", "--batch-size", "256", "--metrics-out", str(out)]
    results = {}
    for name, extra in (("none", []), ("admit", ["--local-admit-after", "3"]), ("cap", ["--local-max-rows", "200"])):
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[name] = json.loads(out.read_text())
    assert results["none"]["not_admitted"] == results["none"]["evicted"] == 0
    assert results["admit"]["not_admitted"] > 0 and results["admit"]["sparse_rows"] < results["none"]["sparse_rows"]
    assert results["cap"]["evicted"] > 0 and results["cap"]["sparse_rows"] <= 210
    proc = subprocess.run([*base[:-4], "--ps", "127.0.0.1:1", "--local-max-rows", "5"], capture_output=True, text=True)
    assert proc.returncode != 0 and "are for --ps local" in proc.stderr


@pytest.mark.slow
def test_a_trainer_busy_for_longer_than_idle_exit_is_not_idle(tmp_path, data_dir):
    """--idle-exit-s counts the time the loop waited for data, not the time since the source
    last had any: a first batch that took long (kernels compiling on a cold cache) made the
    demo's trainer stop after its first file."""
    import threading
    import time

    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:600]
    folder = tmp_path / "stream"
    folder.mkdir()
    (folder / "a.libfm").write_text("\n".join(lines[:300]) + "\n")
    schema = PRESETS["libsvm"]
    fields = FieldIndex([str(i) for i in range(10)])
    client = PSClient.local()
    model = build_model(ModelSpec("lr", fields=tuple(fields.names)))
    model.prepare(client)
    source = StreamSource(str(folder), follow=True, poll_s=0.05)
    settings = LoopSettings(batch_size=300, max_samples=None, idle_exit_s=1.5, export_interval_s=1e9, checkpoint_interval_s=0)
    trainer = Trainer(client, model, schema, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    busy_s = 2.0
    train_batch = trainer.train_batch

    def slow_first(batch):  # the first batch takes longer than --idle-exit-s
        if trainer.submitted == 0:
            threading.Timer(busy_s + 0.3, lambda: (folder / "b.libfm").write_text("\n".join(lines[300:]) + "\n")).start()
            time.sleep(busy_s)
        train_batch(batch)

    trainer.train_batch = slow_first  # type: ignore[method-assign]
    result = trainer.run()
    assert result["samples"] == 600


def _mlp_bytes(client: PSClient) -> tuple[int, int]:
    """(bytes sent, bytes received) of every call on the `mlp` table so far."""
    kinds = client.wire.snapshot().get("mlp", {}).values()
    return sum(s for s, _ in kinds), sum(r for _, r in kinds)


def test_an_export_takes_the_mlp_from_the_worker_and_moves_none_of_it(tmp_path, data_dir):
    """Hybrid training: the MLP a DeepFM export writes is the worker's, tensor for tensor,
    and an export neither writes it to the shards nor reads it back (only cuts and the end
    do: one STATE push)."""
    from safetensors.numpy import load_file

    from trainer.run.exporter import DENSE_FILE, Exporter

    path = tmp_path / "frappe.libsvm"
    path.write_text("\n".join((data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:3000]) + "\n")
    fields = FieldIndex([str(i) for i in range(10)])
    spec = ModelSpec("deepfm", k=4, fields=tuple(fields.names), hidden=(16, 8))
    client = PSClient.local(export_root=tmp_path / "exports")
    model = build_model(spec, device="cpu")
    model.prepare(client)
    exporter = Exporter(client, tmp_path / "exports", "m", spec, fields, {}, full_every=1000, holdout=100)
    settings = LoopSettings(batch_size=256, max_samples=None, idle_exit_s=0, export_interval_s=0.0, checkpoint_interval_s=0)
    source = StreamSource(str(path), follow=False)
    trainer = Trainer(client, model, None, fields, source, settings, ProgressiveMetrics(1000), exporter, lambda: False)
    exported: list[dict] = []
    real_export = exporter.export

    def export(*args, **kwargs):  # record the worker's MLP and the MLP's bytes at each export
        before = _mlp_bytes(client)
        out = real_export(*args, **kwargs)
        assert _mlp_bytes(client) == before
        mlp = model.mlp_for_export()
        assert mlp is not None
        exported.append(mlp)
        return out

    exporter.export = export  # type: ignore[method-assign]
    trainer.run()
    assert len(trainer.exports) >= 3
    for export_id, worker in zip(trainer.exports, exported, strict=True):
        dense = load_file(str(tmp_path / "exports" / export_id / DENSE_FILE))
        assert set(worker) <= set(dense)
        for name, array in worker.items():
            assert array.dtype == np.float32
            np.testing.assert_array_equal(dense[name], array)
    # the end wrote it to the shards: they hold the last export's MLP
    held = client.pull_dense("mlp")
    np.testing.assert_array_equal(held, np.concatenate([a.reshape(-1) for a in exported[-1].values()]))


def _trained_lr(path, data_dir, fail_at_the_end: bool) -> tuple[dict, np.ndarray, int]:
    """LR over in-process shards with RocksDB cuts (a cut every batch); with fail_at_the_end,
    the last cut's prepare fails once as a shard that stopped answering does."""
    from ps.api import ShardRestarted
    from trainer.run.recovery import CutPoint, restore_and_declare

    fields = FieldIndex([str(i) for i in range(10)])
    spec = ModelSpec("lr", fields=tuple(fields.names))
    client = PSClient.local(2, data_dir=data_dir)
    model = build_model(spec)
    model.prepare(client)
    settings = LoopSettings(batch_size=500, max_samples=None, idle_exit_s=0, export_interval_s=0.0, checkpoint_interval_s=1e-9)
    source = StreamSource(str(path), follow=False)
    trainer = Trainer(client, model, None, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    trainer.take_up(
        CutPoint(0),
        lambda at, cut_at: StreamSource(str(path), follow=False, start=at, start_at=cut_at),
        lambda: restore_and_declare(client, model.prepare, False),
    )
    ending, failed = [False], [False]
    real_end, real_prepare = trainer._end_on_shards, client.control.prepare

    def end(started: float) -> None:
        ending[0] = True
        real_end(started)

    def prepare(cut: int, offsets: bytes) -> int:
        if fail_at_the_end and ending[0] and not failed[0]:
            failed[0] = True
            raise ShardRestarted(1, "PS shard 1 did not answer Prepare within 1.5 s")
        return real_prepare(cut, offsets)

    trainer._end_on_shards = end  # type: ignore[method-assign]
    client.control.prepare = prepare  # type: ignore[method-assign]
    result = trainer.run()
    assert failed[0] == fail_at_the_end
    keys = np.unique(np.concatenate([b.keys for b in _batches(path, fields)]))
    return result, client.pull("w", keys, state=True)[0], trainer.recoveries


def _batches(path, fields: FieldIndex) -> list:
    from ctr.data.batch import build_batch
    from ctr.data.formats import make_parser

    parse = make_parser(PRESETS["libsvm"], fields)
    lines = path.read_text().splitlines()
    return [build_batch([parse(x) for x in lines[i : i + 500]], fields.ids()) for i in range(0, len(lines), 500)]


def test_a_shard_that_stops_answering_at_the_last_cut_is_recovered_from_not_a_crash(tmp_path, data_dir):
    """The end of a run (the last pushes, the residuals, the last export and cut) is inside
    the recovery as the stream is: a prepare that fails there takes the shards back to the
    last cut and trains the rest again, and every sample counts once (the soak's seed 23
    found the trainer exiting 1 with a traceback there)."""
    path = tmp_path / "frappe.libsvm"
    path.write_text("\n".join((data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:3000]) + "\n")
    plain, plain_w, _ = _trained_lr(path, tmp_path / "plain", fail_at_the_end=False)
    failed, failed_w, recoveries = _trained_lr(path, tmp_path / "failed", fail_at_the_end=True)
    assert recoveries == 1
    assert failed["samples"] == plain["samples"] == 3000
    np.testing.assert_array_equal(failed_w, plain_w)  # nothing lost, nothing applied twice


def test_ranks_send_only_the_part_of_their_window_the_merge_keeps():
    rng = np.random.default_rng(5)
    ranks = [ProgressiveMetrics(1000) for _ in range(3)]
    for m in ranks:
        for _ in range(7):  # the ring wraps: 1,400 predictions in a window of 1,000
            m.update(rng.integers(0, 2, 200).astype(np.float32), rng.random(200).astype(np.float32))
    whole = ProgressiveMetrics.merge(1000, [m.state() for m in ranks])
    sent = ProgressiveMetrics.merge(1000, [m.state(last=1000 // 3) for m in ranks])
    assert sent.snapshot() == whole.snapshot()
    assert np.asarray(ranks[0].state(last=333)["probs"]).shape == (333,)


def test_a_progress_report_sends_the_window_in_a_quarter_of_the_bytes_and_the_same_auc_to_4_places():
    rng = np.random.default_rng(6)
    ranks = [ProgressiveMetrics(10000) for _ in range(2)]
    for m in ranks:
        labels = rng.integers(0, 2, 8000).astype(np.float32)
        m.update(labels, np.clip(0.1 + 0.3 * labels + rng.normal(0, 0.2, 8000), 0, 1).astype(np.float32))
    whole = ProgressiveMetrics.merge(10000, [m.state(last=5000) for m in ranks]).snapshot()
    compact = ProgressiveMetrics.merge(10000, [m.state(last=5000, compact=True) for m in ranks]).snapshot()
    assert compact["window_samples"] == whole["window_samples"] == 10000
    assert abs(compact["window_auc"] - whole["window_auc"]) < 1e-4
    assert abs(compact["window_logloss"] - whole["window_logloss"]) < 1e-3
    assert {k: compact[k] for k in ("samples", "positives", "progressive_logloss")} == {
        k: whole[k] for k in ("samples", "positives", "progressive_logloss")
    }
    sizes = [len(pickle.dumps(ranks[0].state(last=5000, compact=c))) for c in (False, True)]
    assert sizes[1] < sizes[0] / 3.5


def test_a_compact_report_keeps_soft_labels_whole():
    m = ProgressiveMetrics(100)
    soft = np.array([0.0, 0.25, 1.0, 0.75], dtype=np.float32)
    m.update(soft, np.array([0.1, 0.4, 0.9, 0.6], dtype=np.float32))
    state = m.state(compact=True)
    assert "label_bits" not in state
    merged = ProgressiveMetrics.merge(100, [state])
    np.testing.assert_array_equal(merged.labels[: merged.filled], soft)


def test_ranks_whose_mlps_differ_are_named_and_devices_apart_are_told_apart():
    assert replicas_verdict([("cpu", 7), ("cpu", 7)]) is None
    assert replicas_verdict([None, None]) is None  # no MLP (LR, FM, FFM)
    assert replicas_verdict([("cpu", 7), ("cpu", 8)]) == "rank 0: cpu 00000007, rank 1: cpu 00000008"
    assert replicas_verdict([("cuda:0", 7), ("cuda:1", 8)]) == "rank 0: cuda:0 00000007, rank 1: cuda:1 00000008"
    assert replicas_verdict([("cpu", 7), ("cuda:0", 8)]) == "devices"  # may drift in rounding


def test_export_ids_rise_when_the_clock_steps_back_or_the_folder_holds_later_ones(tmp_path, monkeypatch):
    """The manager publishes exports in id order and skips ids at or below the last it
    handled: an id taken from a clock stepped back (NTP), or from a host whose clock lags the
    one that exported into the folder before, was an export nobody would publish."""
    import time as real_time

    from trainer.run import exporter as exporter_module
    from trainer.run.exporter import Exporter

    fields = FieldIndex([str(i) for i in range(4)])
    spec = ModelSpec("lr", k=1, fields=tuple(fields.names))
    exports = tmp_path / "exports"
    client = PSClient.local(export_root=exports)
    build_model(spec, device="cpu").prepare(client)
    exporter = Exporter(client, exports, "m", spec, fields, {}, full_every=1000, holdout=0)
    now = real_time.time_ns()
    clock = iter([now, now - 5_000_000_000, now - 5_000_000_000])
    monkeypatch.setattr(exporter_module.time, "time_ns", lambda: next(clock))
    first = exporter.export({})
    stepped_back = exporter.export({})
    assert int(first) == now and stepped_back > first and len(stepped_back) == len(first) == 20

    # a new trainer (another host, its clock a minute behind) exporting into the same folder
    later = Exporter(client, exports, "m", spec, fields, {}, full_every=1000, holdout=0)
    monkeypatch.setattr(exporter_module.time, "time_ns", lambda: now - 60_000_000_000)
    assert later.export({}) > stepped_back


def test_a_file_the_stream_lost_counts_once_across_the_sources_a_recovery_opens(tmp_path):
    """A recovery opens the stream again at the cut, and the new source says a late file
    again: the run's count names each file once (before, the new source's count replaced
    the old one's, and the files lost before the recovery were left out of the summary)."""
    import time

    for name in ("a-late", "b"):
        (tmp_path / name).write_text("1 1:1\n")
    at = Position(str(tmp_path / "b"), 0, 0)
    cut_at = time.time() - 60  # both files changed after it: a-late sorts before the cut's file
    first, again = (StreamSource(str(tmp_path), follow=False, start=at, start_at=cut_at) for _ in range(2))
    assert first.lost == again.lost == [str(tmp_path / "a-late")]
    trainer = Trainer.__new__(Trainer)  # the count alone: no shards
    trainer.lost_before, trainer.source = set(first.lost), again  # as _recover_from leaves them
    assert trainer.lost_files == 1


def test_a_cut_writes_the_mlp_while_the_residuals_drain_and_says_where_its_stall_went(tmp_path, data_dir, caplog):
    """Hybrid DeepFM: a cut's dense write runs beside the sparse residuals' drain (their
    times overlap, on two threads), the shards then hold the worker's MLP exactly, and the
    cut's log line splits the stall into its parts."""
    import threading
    import time

    path = tmp_path / "frappe.libsvm"
    path.write_text("\n".join((data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:2000]) + "\n")
    fields = FieldIndex([str(i) for i in range(10)])
    spec = ModelSpec("deepfm", k=4, fields=tuple(fields.names), hidden=(16, 8))
    client = PSClient.local(2, data_dir=tmp_path / "ps")
    model = build_model(spec, device="cpu")
    model.prepare(client)
    settings = LoopSettings(batch_size=256, max_samples=None, idle_exit_s=0, export_interval_s=1e9, checkpoint_interval_s=1e-3)
    source = StreamSource(str(path), follow=False)
    trainer = Trainer(client, model, None, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    spans: list[tuple[str, float, float, int]] = []

    def spanned(name, fn):
        def run(*args):
            at = time.perf_counter()
            fn(*args)
            if name == "model" or args == ("cut",):
                time.sleep(0.3)  # long enough that two calls one after the other cannot overlap
                spans.append((name, at, time.perf_counter(), threading.get_ident()))

        return run

    model.finish = spanned("model", model.finish)  # type: ignore[method-assign]
    client.flush_residuals = spanned("drains", client.flush_residuals)  # type: ignore[method-assign]
    assert model.finish_is_dense
    caplog.set_level("INFO", logger="trainer")
    trainer.run()
    assert trainer.cut >= 2
    cuts = [s for s in spans if s[0] == "drains"]
    assert len(cuts) == trainer.cut
    for _, d0, d1, d_thread in cuts:  # each cut's drain overlaps a dense write on another thread
        assert any(n == "model" and m_thread != d_thread and m0 < d1 and d0 < m1 for n, m0, m1, m_thread in spans)
    # the end wrote the MLP with its state too: the shards hold the worker's, bit for bit
    held = client.pull_dense("mlp", state=True)
    np.testing.assert_array_equal(held[:, :3].astype(np.float32).astype(np.float64), held[:, :3])
    from trainer.step.dnn import DeepModel

    assert isinstance(model, DeepModel) and model.replica is not None
    np.testing.assert_array_equal(held[:, 0], np.concatenate([p.detach().numpy().reshape(-1) for p in model.replica.params]))
    said = [r.getMessage() for r in caplog.records if "checkpoint cut" in r.getMessage()]
    assert said and "ms of training stalled (flush " in said[-1] and ", drains " in said[-1] and ", model " in said[-1]
    assert ", prepare " in said[-1]


def test_a_cut_whose_drain_fails_waits_for_the_mlp_write_before_it_raises(tmp_path, data_dir):
    """A failed drain sends the trainer to recovery, which takes the shards back to a cut:
    the MLP's write, running beside the drain, must be over by then, or it would land on
    the state recovery restored."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "frappe.libsvm"
    path.write_text("\n".join((data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:600]) + "\n")
    fields = FieldIndex([str(i) for i in range(10)])
    spec = ModelSpec("deepfm", k=4, fields=tuple(fields.names), hidden=(16, 8))
    client = PSClient.local()
    model = build_model(spec, device="cpu")
    model.prepare(client)
    settings = LoopSettings(batch_size=256, max_samples=None, idle_exit_s=0, export_interval_s=1e9, checkpoint_interval_s=0)
    source = StreamSource(str(path), follow=False)
    trainer = Trainer(client, model, None, fields, source, settings, ProgressiveMetrics(1000), None, lambda: False)
    trainer.run()  # trained; the executors are shut down: make the cut's own
    trainer._writer = ThreadPoolExecutor(1)
    write_done = threading.Event()

    def slow_finish(c: PSClient) -> None:
        time.sleep(0.5)
        write_done.set()

    def failing_drain(cause: str = "end") -> None:
        raise RuntimeError("a shard went away")

    model.finish = slow_finish  # type: ignore[method-assign,assignment]
    client.flush_residuals = failing_drain  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a shard went away"):
        trainer.settle()
    assert write_done.is_set()
    trainer._writer.shutdown()
