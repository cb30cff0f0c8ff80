"""The one training loop, per-sample losses, and deterministic per-pair scoring."""
