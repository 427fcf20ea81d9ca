"""The transport floor of a Predict call: a Predictor that parses the request and answers
one constant score per item, served exactly as `boundless serve` serves (ctr.daemon's
gRPC server: its options, thread pool and health service), in its own process on
127.0.0.1, port 0. bench_serving times the same requests against it and against the real
server, so what gRPC costs and what scoring costs read apart. Not part of the product.

    .venv/bin/python -m bench.grpc_floor   # prints {"pid": ..., "grpc_port": ...}, stops on SIGTERM
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc

from ctr import daemon
from protos import predict_pb2, predict_pb2_grpc
from serving.config import ServingConfig

ROOT = Path(__file__).resolve().parents[1]


class ConstantPredictor(predict_pb2_grpc.PredictorServicer):
    """Scores every item 0.5: the request still arrives, is parsed and is answered."""

    def Predict(self, request: predict_pb2.PredictRequest, context: grpc.ServicerContext) -> predict_pb2.PredictResponse:
        return predict_pb2.PredictResponse(scores=[0.5] * request.item_count, model="floor", version=1)


MAX_CONCURRENT = 64  # as bench_serving starts `boundless serve`


def main() -> None:
    conf = ServingConfig()
    server, port, _ = daemon.grpc_server(
        "127.0.0.1",
        0,
        conf.workers,
        lambda s: predict_pb2_grpc.add_PredictorServicer_to_server(ConstantPredictor(), s),
        [predict_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name],
        max_message_bytes=int(conf.max_request_mb * (1 << 20)),
        max_concurrent=MAX_CONCURRENT,
    )
    daemon.write_ready_file(None, grpc_port=port)
    daemon.wait_for_stop_signal()
    server.stop(grace=1).wait()


@dataclass
class FloorServer:
    proc: subprocess.Popen[str]
    address: str

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def start_floor(timeout_s: float = 60.0) -> FloorServer:
    """The constant Predictor in a child process, once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.grpc_floor"], cwd=ROOT, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)  # its one line comes at once, or never
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError(f"bench.grpc_floor did not listen within {timeout_s:.0f} s (exit code {proc.returncode})")
    return FloorServer(proc, f"127.0.0.1:{json.loads(line)['grpc_port']}")


if __name__ == "__main__":
    main()
