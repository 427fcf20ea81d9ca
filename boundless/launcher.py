"""`boundless demo`: the whole platform on one machine, as separate processes on 127.0.0.1:
2 PS shards, the trainer, the model manager and one serving process, on a synthetic stream
(or --data PATH) written as rolling files or, with --source kafka, into a local Kafka
broker; then Predict latency for 200-item requests, then a clean stop. On the synthetic
stream it also trains LR in-process on the same stream, so the report shows what the
chosen model gains over LR, beside the planted model's own AUC."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from boundless import report
from boundless.certs import make as make_certs
from boundless.kafka_broker import BrokerUnavailable, KafkaBroker, produce_lines
from boundless.processes import Daemon, DaemonDied, start
from boundless.synthetic import SyntheticSpec, SyntheticStream
from ctr.data.batch import build_batch
from ctr.data.formats import list_columns, read_lines
from ctr.data.quality import auc
from ctr.repository.versions import Repository
from ctr.runtime import strict_json
from ctr.runtime.security import Identity, install
from serving.client import PredictClient, encode_batch
from serving.client.predict_cli import parse_samples
from serving.request.encoding import EncodedRequest

TOPIC = "samples"
PARTITIONS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="lr", choices=["lr", "fm", "ffm", "wdl", "deepfm"], help="model to train")
    parser.add_argument("--k", type=int, default=8, help="embedding size")
    parser.add_argument("--hidden", default="128,64", help="MLP layers of wdl and deepfm")
    parser.add_argument("--data", type=Path, default=None, help="stream this file instead of the synthetic stream")
    parser.add_argument("--format", default="auto", help="format of --data (schema preset or auto)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of synthetic stream")
    parser.add_argument("--rate", type=int, default=15000, help="synthetic samples per second")
    parser.add_argument("--ps-shards", type=int, default=2, help="PS shard processes")
    parser.add_argument("--requests", type=int, default=300, help="Predict requests for the latency figure")
    parser.add_argument("--items", type=int, default=200, help="items per Predict request")
    parser.add_argument("--workdir", type=Path, default=None, help="run folder (default runs/demo-<time>)")
    parser.add_argument(
        "--tls", action="store_true", help="every process over mutual TLS with bearer tokens (certificates from boundless certs)"
    )
    parser.add_argument(
        "--source",
        default="files",
        choices=["files", "kafka"],
        help="files: rolling files in a folder; kafka: a topic of a local broker (Tansu, 2 partitions)",
    )


def _scrape(port: int, name: str) -> float:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return float("nan")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = args.workdir or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.daemons: list[Daemon] = []
        self.tty = sys.stdout.isatty()
        self.part = 0
        self.oracle: list[tuple[np.ndarray, np.ndarray]] = []  # (labels, planted logits) of the last parts
        self.broker: KafkaBroker | None = None
        self.producer: Any = None
        self.guarded: list[str] = []  # a server's TLS and tokens flags (--tls)
        self.caller: list[str] = []  # the trainer's TLS and token flags (--tls)
        self.token: list[str] = []  # the trainer's token, which the manager also calls serving with
        if args.tls:
            self.secure()

    def secure(self) -> None:
        """A CA, certificates and tokens for this run; the servers ask for client certificates
        and tokens, and this process calls serving with the client certificate and the predict token."""
        paths = make_certs(self.dir / "certs", ["localhost", "127.0.0.1"])
        tls = ["--tls-cert", str(paths["node"]), "--tls-key", str(paths["node_key"]), "--tls-ca", str(paths["ca"])]
        self.guarded = [*tls, "--tls-client-auth", "--accepted-tokens-file", str(paths["tokens"])]
        self.token = ["--token-file", str(paths["trainer_token"])]
        self.caller = [*tls, *self.token]
        token = paths["predict_token"].read_text().strip()
        install(Identity(paths["client"].read_bytes(), paths["client_key"].read_bytes(), paths["ca"].read_bytes(), token=token))

    def say(self, msg: str) -> None:
        print(msg, flush=True)

    def check_all(self) -> None:
        for d in self.daemons:
            if d.name != "trainer":
                d.check()

    def start_platform(self) -> tuple[list[Daemon], Daemon, Daemon]:
        d = self.dir
        shards = [
            start(
                f"ps{i}",
                ["ps", "--shard-index", str(i), "--shard-count", str(self.args.ps_shards), "--data-dir", str(d / f"ps{i}")]
                + ["--export-root", str(d / "exports"), *self.guarded],
                d,
            )
            for i in range(self.args.ps_shards)
        ]
        serving = start("serving", ["serve", "--repo", str(d / "repo"), *self.guarded], d)
        serving.wait_ready()
        mgr_args = ["model", "watch", "--exports", str(d / "exports"), "--repo", str(d / "repo"), "--notify", serving.address]
        # a server (its admin service) that calls serving with the trainer's token
        mgr = start("modelmgr", [*mgr_args, *self.guarded, *self.token], d)
        self.daemons += [*shards, mgr, serving]
        for x in self.daemons:
            x.wait_ready()
        self.say(
            f"started {len(shards)} PS shards ({', '.join(s.address for s in shards)}), "
            f"model manager, serving ({serving.address}){' over mutual TLS with tokens' if self.args.tls else ''}; logs in {d}"
        )
        return shards, mgr, serving

    def start_broker(self) -> str:
        """A local Kafka-protocol broker with a 2-partition topic; returns its --source URL."""
        self.broker = KafkaBroker(self.dir / "kafka.log")
        url = self.broker.create_topic(TOPIC, PARTITIONS)
        self.producer = self.broker.producer()
        self.say(f"started a Kafka broker (Tansu) on {self.broker.bootstrap}, topic {TOPIC} ({PARTITIONS} partitions)")
        if self.args.data:
            produce_lines(self.producer, TOPIC, self.args.data.read_text().splitlines(), PARTITIONS)
        return url

    def run(self) -> int:
        synth = SyntheticStream(SyntheticSpec())
        stream_dir = self.dir / "stream"
        stream_dir.mkdir(exist_ok=True)
        try:
            shards, mgr, serving = self.start_platform()
            source = str(self.args.data) if self.args.data else str(stream_dir)
            if self.args.source == "kafka":
                source = self.start_broker()
            if not self.args.data:
                self.write_part(synth, stream_dir)  # the trainer reads its field list from the first data
            trainer = start(
                "trainer",
                [
                    "train",
                    "--source",
                    source,
                    "--model",
                    self.args.model,
                    "--k",
                    str(self.args.k),
                    "--hidden",
                    self.args.hidden,
                    "--ps",
                    ",".join(s.address for s in shards),
                    "--format",
                    self.args.format if self.args.data else "kv",
                    "--export-dir",
                    str(self.dir / "exports"),
                    "--export-interval-s",
                    "5",
                    "--idle-exit-s",
                    "4",
                    "--metrics-out",
                    str(self.dir / "trainer.json"),
                    "--curve-out",
                    str(self.dir / report.CURVE),
                    "--progress-interval-s",
                    "1",
                    "--checkpoint-interval-s",
                    "20",
                    *self.caller,
                    *([] if self.args.data else ["--follow"]),
                    *(["--no-follow"] if self.args.data else []),
                ],
                self.dir,
            )
            self.daemons.append(trainer)
            trainer_port = int(trainer.wait_ready()["metrics_port"])
            self.stream(synth, stream_dir, trainer, trainer_port)
            code = trainer.proc.wait()
            if code != 0:
                trainer.check()
            result = json.loads((self.dir / "trainer.json").read_text())
            repo = Repository(self.dir / "repo", "ctr")
            self.wait_published(repo, int(result["exports"]), serving)
            if repo.target() is None:  # every export rejected: nothing to serve or measure
                reasons = "; ".join(f"{r.get('export_id')}: {r.get('reason')}" for r in repo.rejected()) or "none handled"
                print(f"demo: the model manager published no version ({reasons}); logs in {self.dir}", file=sys.stderr)
                return 1
            latency = self.measure(serving, synth)
            self.save_serving_metrics(serving)
            baseline = None if self.args.data or self.args.model == "lr" else self.lr_baseline(source)
            self.report(result, repo, latency, baseline)
            self.draw()
            return 0
        except (DaemonDied, BrokerUnavailable) as e:
            print(f"demo failed: {e}", file=sys.stderr)
            return 1
        finally:
            for x in reversed(self.daemons):
                x.stop()
            # the producer goes while its broker still answers: left to the interpreter's
            # exit, librdkafka reconnected to a stopped broker, logged the refusals and
            # held the exit for seconds
            self.producer = None
            if self.broker is not None:
                self.broker.stop()

    def stream(self, synth: SyntheticStream, folder: Path, trainer: Daemon, port: int) -> None:
        """Writes rolling files of synthetic samples while showing progress."""
        started = time.monotonic()
        end = started + (0 if self.args.data else self.args.duration)
        last_show = 0.0
        while True:
            now = time.monotonic()
            self.check_all()
            if now < end:
                self.write_part(synth, folder)
            elif trainer.proc.poll() is not None:
                return
            trained = _scrape(port, "boundless_trainer_samples_total") if now - last_show >= 5 else float("nan")
            if trained == trained:  # NaN: not time to show, or the trainer has ended and its metrics with it
                versions = len(Repository(self.dir / "repo", "ctr").versions())
                # --data streams a file: nothing is generated, and the run lasts as long as the file
                generated = "" if self.args.data else f"generated {self.part * self.args.rate:>9,}  "
                self.say(f"  t={now - started:5.0f}s  {generated}trained {trained:>11,.0f}  versions {versions}")
                last_show = now
            time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))

    def write_part(self, synth: SyntheticStream, folder: Path) -> None:
        """One second of the synthetic stream as a file that lands whole, as a rolled file would."""
        self.part += 1
        vals, logits, labels = synth.sample(self.args.rate)
        lines = synth.format(vals, labels)
        self.oracle = [*self.oracle[-2:], (labels, logits)]
        if self.producer is not None:
            produce_lines(self.producer, TOPIC, lines, PARTITIONS)
            return
        tmp = folder / f".part-{self.part:05d}.txt"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(folder / f"part-{self.part:05d}.txt")

    def lr_baseline(self, source: str) -> dict[str, float]:
        """LR trained in-process on the same stream, for the comparison line of the report."""
        out = self.dir / "lr-baseline.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", source, "--no-follow", "--ps", "local"]
        cmd += ["--model", "lr", "--format", "kv", "--metrics-port", "-1", "--metrics-out", str(out)]
        self.say("training LR on the same stream in-process, for comparison...")
        with open(self.dir / "lr-baseline.log", "wb") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=600)
        return dict(json.loads(out.read_text()))

    def wait_published(self, repo: Repository, exports: int, serving: Daemon, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_all()
            if len(repo.processed_exports()) >= exports:
                break
            time.sleep(0.2)
        if repo.target() is None:
            return  # nothing published: nothing for serving to load
        client = PredictClient(serving.address)
        while time.monotonic() < deadline:
            try:
                if client.status().version == repo.target():
                    break
            except Exception:  # not loaded yet
                pass
            time.sleep(0.2)
        client.close()

    def file_requests(self, client: PredictClient) -> list[EncodedRequest]:
        """Requests of --data's own rows, parsed under the served version's transform: the
        latency of the requests this model gets, not of the synthetic stream's features."""
        assert self.args.data is not None
        lines = read_lines(str(self.args.data))  # compressed too, as training read it
        need = self.args.requests * self.args.items
        try:
            samples, fields, _ = parse_samples(
                lines[: need + 1], client.status(), "model", where=str(self.args.data), lists=list_columns(str(self.args.data))
            )
        except ValueError as e:  # mostly bad lines under the served model's transform
            raise DaemonDied(f"{self.args.data} does not parse under the served model's transform: {e}") from None
        requests = []
        for r in range(self.args.requests):
            lo = (r * self.args.items) % len(samples)
            part = (samples * (2 + self.args.items // len(samples)))[lo : lo + self.args.items]
            requests.append(encode_batch(build_batch(part, fields.ids())))
        return requests

    def measure(self, serving: Daemon, synth: SyntheticStream) -> dict[str, float]:
        """Predict latency for ranking requests: shared user/context fields, varying items
        (with --data, requests of the file's own rows)."""
        client = PredictClient(serving.address)
        client.wait_ready()
        half = synth.spec.fields // 2
        lat = []
        size = 0
        from_file = self.file_requests(client) if self.args.data else None
        for r in range(self.args.requests):
            if from_file is not None:
                req = from_file[r]
            else:
                vals, _, _ = synth.sample(self.args.items)
                context = {synth.names[f]: str(vals[0, f]) for f in range(half)}
                items = [{synth.names[f]: str(row[f]) for f in range(half, synth.spec.fields)} for row in vals]
                req = client.encoder.encode(items, context)
            size = req.nbytes
            t = time.perf_counter()
            pred = client.predict_encoded(req)
            lat.append(time.perf_counter() - t)
            if pred.scores.shape[0] != self.args.items:
                raise DaemonDied(f"Predict returned {pred.scores.shape[0]} scores for {self.args.items} items")
            if r == 0:
                self.check_all()
        client.close()
        ms = np.array(lat[len(lat) // 10 :]) * 1000  # the first requests warm the path up
        doc = {"predict_ms": ms.tolist(), "items": self.args.items, "request_bytes": size, "warm_up_requests": len(lat) // 10}
        (self.dir / report.LATENCY).write_text(json.dumps(doc))
        return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)), "bytes": float(size)}

    def save_serving_metrics(self, serving: Daemon) -> None:
        """Serving's Prometheus exposition, for the report's server-side latency histogram."""
        port = serving.ready.get("metrics_port")
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError as e:
            self.say(f"  (serving's metrics could not be read: {e})")
            return
        (self.dir / report.SERVING_METRICS).write_text(text)

    def draw(self) -> None:
        try:
            pngs = report.make(self.dir)
        except report.ReportError as e:
            self.say(f"  no report: {e}")
            return
        self.say(f"  report                    {', '.join(str(p) for p in pngs)} (boundless report {self.dir})")

    def report(
        self, result: dict[str, float], repo: Repository, latency: dict[str, float], baseline: dict[str, float] | None
    ) -> None:
        versions = repo.versions()
        kinds = [repo.manifest(v)["kind"] for v in versions]
        self.say("")
        self.say(f"Boundless demo finished ({self.args.model})")
        held = result.get("held_out_samples", 0.0)
        self.say(
            f"  samples trained           {result['samples']:,.0f} ({result['bad_lines']:.0f} bad lines"
            + (f"; the last {held:,.0f} held out, the last version's holdout)" if held else ")")
        )
        self.say(f"  progressive AUC (last {result['window_samples']:,.0f})  {result['window_auc']:.4f}")
        if baseline is not None:
            lr_auc, lr_loss = baseline["window_auc"], baseline["progressive_logloss"]
            self.say(f"  LR on the same stream     AUC {lr_auc:.4f}, logloss {lr_loss:.4f}")
        if self.oracle:
            labels = np.concatenate([y for y, _ in self.oracle])
            planted = np.concatenate([z for _, z in self.oracle])
            self.say(f"  planted model (the best possible) AUC {auc(labels, planted):.4f} on the last parts")
        self.say(
            f"  progressive logloss       {result['progressive_logloss']:.4f} (all), {result['window_logloss']:.4f} (window)"
        )
        self.say(
            f"  versions published        {len(versions)} ({kinds.count('full')} full, {kinds.count('delta')} delta), "
            f"rejected {len(repo.rejected())}, serving {repo.target()}"
        )
        self.say(f"  exports, repository       {self.dir / 'exports'}, {self.dir / 'repo'} (boundless model list --repo ...)")
        self.say(
            f"  Predict, {self.args.items} items/request  p50 {latency['p50']:.2f} ms  p99 {latency['p99']:.2f} ms  "
            f"({latency['bytes'] / 1024:.1f} KiB/request, {self.args.requests} requests)"
        )
        summary = {**result, "versions": len(versions), "latency_ms": latency, "lr_baseline": baseline}
        (self.dir / "demo.json").write_text(strict_json.dumps(summary, indent=1))


def run(args: argparse.Namespace) -> int:
    return Demo(args).run()
