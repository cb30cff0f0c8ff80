"""Stages that run after any method: partition, significance, pseudo-captions."""

# The most query-reference similarities a stage computes (0.5 TFLOP at 512 dimensions, 3-4 s on
# two cores). A stage whose references (significance's confident pool, pseudo-captions' clean
# donors) would exceed it searches a seeded sample of ``SEARCH_BUDGET // n_queries`` references
# (never fewer than ``MIN_REFERENCES``); corpora up to ~20k pairs are never sampled.
SEARCH_BUDGET = 500_000_000
MIN_REFERENCES = 1024


def corpus_queries(n_queries: int, n_pairs: int, corpus_pairs: int | None = None) -> int:
    """The queries a stage's budget is shared among: ``n_queries`` of ``n_pairs`` scored pairs,
    or, when those pairs are the fit sample of a corpus of ``corpus_pairs``, as many of the
    corpus's (the same share). A fit's sample then searches as many references as one pass over
    the whole corpus would, and as the fit's application does."""
    if corpus_pairs is None or corpus_pairs <= n_pairs:
        return n_queries
    return n_queries * corpus_pairs // max(1, n_pairs)


def reference_cap(n_queries: int) -> int:
    """How many references a stage searches for ``n_queries`` queries (see ``SEARCH_BUDGET``)."""
    return max(MIN_REFERENCES, SEARCH_BUDGET // max(1, n_queries))
