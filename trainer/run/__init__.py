"""The run around the steps: the training loop, exports and their manifests, checkpoint cuts
and recovery (exactly-once), several worker processes, the summary. Imports ctr,
trainer.input, trainer.step, ps.api and ps.client."""
