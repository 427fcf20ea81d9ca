"""From export to version: verification, the evaluation on the holdout, the quality gate,
the publish/reject/rollback decisions and compaction of delta chains."""
