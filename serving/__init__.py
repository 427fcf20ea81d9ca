"""Prediction service: loads published versions, scores compact-encoded ranking requests."""
