"""Stages that run after any method: partition, significance, pseudo-captions."""
