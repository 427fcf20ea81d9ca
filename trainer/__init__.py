"""Streaming trainer: reads samples, trains through the PS client, asks for exports."""
