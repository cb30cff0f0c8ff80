"""How well a cleaner works: detection of noisy pairs and retrieval quality of a matcher."""
