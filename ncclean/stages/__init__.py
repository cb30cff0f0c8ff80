"""Stages that run after any method: partition, significance, pseudo-captions."""

# The most query-reference similarities a stage computes (0.5 TFLOP at 512 dimensions, 3-4 s on
# two cores). A stage whose references (significance's confident pool, pseudo-captions' clean
# donors) would exceed it searches a seeded sample of ``SEARCH_BUDGET // n_queries`` references
# (never fewer than ``MIN_REFERENCES``); corpora up to ~20k pairs are never sampled.
SEARCH_BUDGET = 500_000_000
MIN_REFERENCES = 1024


def reference_cap(n_queries: int) -> int:
    """How many references a stage searches for ``n_queries`` queries (see ``SEARCH_BUDGET``)."""
    return max(MIN_REFERENCES, SEARCH_BUDGET // max(1, n_queries))
