"""Encoders, the matcher, its checkpoints, and the features it consumes."""
