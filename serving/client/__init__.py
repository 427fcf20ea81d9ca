"""The client library of the prediction service: plain dicts or numpy columns in, the
model's own feature transform applied, compactly encoded requests out. Imports ctr.data,
serving.request and protos; no torch and no serving internals."""

from serving.client.predict_client import PredictClient, RequestEncoder, encode_batch, schema_of

__all__ = ["PredictClient", "RequestEncoder", "encode_batch", "schema_of"]
