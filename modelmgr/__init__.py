"""Model manager: verifies exports, gates them on quality, publishes versions, keeps the policy."""
