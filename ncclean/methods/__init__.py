"""Noisy-correspondence methods: the protocol and registry (``base``), the shared mixture, and one
module per method."""
