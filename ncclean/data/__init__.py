"""Pairs in and out: schema, Parquet reading and atomic writing, images, text, noise, synth."""
