"""The transport floor of a Predict call: a Predictor that parses the request and answers
one constant score per item, served exactly as `boundless serve` serves (ctr.runtime.daemon's
gRPC server: its options, thread pool and health service), in its own process on
127.0.0.1, port 0. bench_serving starts it with boundless.processes.start and times the
same requests against it and against the real server, so what gRPC costs and what
scoring costs read apart. Not part of the product.

    .venv/bin/python -m bench.grpc_floor --ready-file F   # writes {"pid": ..., "grpc_port": ...}, stops on SIGTERM
"""

from __future__ import annotations

import argparse

import grpc

from ctr.runtime import daemon
from protos import predict_pb2, predict_pb2_grpc
from serving.config import ServingConfig


class ConstantPredictor(predict_pb2_grpc.PredictorServicer):
    """Scores every item 0.5: the request still arrives, is parsed and is answered."""

    def Predict(self, request: predict_pb2.PredictRequest, context: grpc.ServicerContext) -> predict_pb2.PredictResponse:
        return predict_pb2.PredictResponse(scores=[0.5] * request.item_count, model="floor", version=1)


MAX_CONCURRENT = 64  # as bench_serving starts `boundless serve`


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ready-file", default=None)
    args = ap.parse_args()
    conf = ServingConfig()
    server, port, _ = daemon.grpc_server(
        "127.0.0.1",
        0,
        conf.grpc_threads,
        lambda s: predict_pb2_grpc.add_PredictorServicer_to_server(ConstantPredictor(), s),
        [predict_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name],
        max_message_bytes=int(conf.max_request_mb * (1 << 20)),
        max_concurrent=MAX_CONCURRENT,
    )
    daemon.write_ready_file(args.ready_file, grpc_port=port)
    daemon.wait_for_stop_signal()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
