"""Nearest-neighbour indexes for the stages' reference sets: faiss and usearch (issue 38).

    OMP_NUM_THREADS=1 python benchmarks/kernels/ann_index.py  # the 100k table of ann-index.md
    OMP_NUM_THREADS=1 python benchmarks/kernels/ann_index.py --donors 20000  # a quick look
    OMP_NUM_THREADS=1 python benchmarks/kernels/ann_index.py --pool 20000 \\
        --queries 100000  # specificity

For each data set (``clustered`` and ``diffuse``: caption vectors around topics, each query an image
vector near one donor; ``isotropic``: uniform on the sphere, where no neighbour is near and any
graph index fails) and each index setting (HNSW in faiss and usearch, faiss's IVF-Flat and IVF-SQ8),
one thread throughout: build time, query time for ``--queries`` queries, recall@1 against exact
inner-product search (blocked float32 matrix products in torch, timed in the same process as the
reference), and the serialized index size (the vectors themselves are ``donors x 512 x 4`` bytes of
it). ``reranked`` is recall@1 after the exact inner products of the index's ``k`` candidates pick
the best (what :mod:`ncclean.stages.index` does), and ``score gap`` the mean inner product that pick
loses against the exact best (what a miss costs).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_data(kind: str, n: int, n_queries: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    if kind == "isotropic":
        return unit(rng.standard_normal((n, dim))), unit(rng.standard_normal((n_queries, dim)))
    # a caption: its topic (100 captions each) plus ``spread`` times as much noise; an image: a
    # caption plus twice ``spread`` as much noise. clustered: cosine ~0.7 to the topic, ~0.45
    # between an image and its caption; diffuse: ~0.45 and ~0.25, near neighbours close together
    spread = {"clustered": 1.0, "diffuse": 2.0}[kind]
    topics = unit(rng.standard_normal((max(1, n // 100), dim)))
    donors = unit(topics[rng.integers(0, len(topics), n)]
                  + spread * rng.standard_normal((n, dim)) / np.sqrt(dim))
    queries = unit(donors[rng.integers(0, n, n_queries)]
                   + 2 * spread * rng.standard_normal((n_queries, dim)) / np.sqrt(dim))
    return donors, queries


def exact_top(donors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    keys = torch.from_numpy(donors)
    out = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), 2048):
        out[start:start + 2048] = (torch.from_numpy(queries[start:start + 2048]) @ keys.T) \
            .argmax(1).numpy()
    return out


def rerank(donors: np.ndarray, queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    safe = np.maximum(candidates, 0)
    scores = np.einsum("qd,qkd->qk", queries, donors[safe])
    scores[candidates < 0] = -np.inf
    return safe[np.arange(len(queries)), scores.argmax(1)]


def score_gap(donors: np.ndarray, queries: np.ndarray, found: np.ndarray,
              truth: np.ndarray) -> float:
    """Mean of (best score - the found donor's score): what a miss costs."""
    return float(np.mean(np.einsum("qd,qd->q", queries, donors[truth] - donors[found])))


def run_faiss(donors, queries, m: int, ef_add: int, efs: list[int], k: int):
    import faiss

    faiss.omp_set_num_threads(1)
    start = time.perf_counter()
    index = faiss.IndexHNSWFlat(donors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_add
    index.add(donors)
    build = time.perf_counter() - start
    size = faiss.serialize_index(index).nbytes
    for ef in efs:
        index.hnsw.efSearch = max(ef, k)
        start = time.perf_counter()
        _, found = index.search(queries, k)
        yield build, size, ef, time.perf_counter() - start, found


def run_faiss_ivf(donors, queries, m: int, ef_add: int, efs: list[int], k: int,
                  sq8: bool = False):
    """faiss IVF-Flat (IVF-SQ8 with ``sq8``: the lists hold 8-bit codes, not float32):
    ``m`` times sqrt(n) k-means lists; ``efs`` are the lists probed."""
    import faiss

    faiss.omp_set_num_threads(1)
    start = time.perf_counter()
    lists, dim = int(m * np.sqrt(len(donors))), donors.shape[1]
    if sq8:
        index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, lists,
                                              faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists,
                                   faiss.METRIC_INNER_PRODUCT)
    index.train(donors)
    index.add(donors)
    build = time.perf_counter() - start
    size = faiss.serialize_index(index).nbytes
    for probes in efs:
        index.nprobe = probes
        start = time.perf_counter()
        _, found = index.search(queries, k)
        yield build, size, probes, time.perf_counter() - start, found


def run_usearch(donors, queries, m: int, ef_add: int, efs: list[int], k: int):
    from usearch.index import Index

    start = time.perf_counter()
    index = Index(ndim=donors.shape[1], metric="ip", dtype="f32", connectivity=m,
                  expansion_add=ef_add)
    index.add(np.arange(len(donors)), donors, threads=1)
    build = time.perf_counter() - start
    size = len(index.save())
    for ef in efs:
        index.expansion_search = max(ef, k)
        start = time.perf_counter()
        found = index.search(queries, k, threads=1).keys.astype(np.int64)
        yield build, size, ef, time.perf_counter() - start, found


# The specificity arm's estimate (measured, not kept in ncclean: results/ann-index.md).
_BLOCK = 2048


def log_partition(index, queries: np.ndarray, query_label: np.ndarray,
                  reference_label: np.ndarray, temperature: float, sample: np.ndarray,
                  k: int = 64) -> np.ndarray:
    """``(nq,) float64``: ``log sum_j exp(q . r_j / temperature)`` over the references whose
    label differs from the query's, estimated: the index's ``k`` best candidates exactly, the
    rest from ``sample`` (sorted reference positions, a seeded sample) scaled to their number.
    At a low temperature the nearest references carry most of the sum, and a query near none
    (a caption that fits hundreds of images equally) is averaged well by the sample."""
    order = np.argsort(reference_label, kind="stable")
    sorted_label = reference_label[order]
    sample_vectors = torch.from_numpy(index.references[sample])
    sample_label = reference_label[sample]
    out = np.empty(len(queries))
    for start in range(0, len(queries), _BLOCK):
        q, label = queries[start:start + _BLOCK], query_label[start:start + _BLOCK]
        found, scores = index.candidates(q, k)
        top = (found >= 0) & (reference_label[np.maximum(found, 0)] != label[:, None])
        top_lse = _logsumexp(np.where(top, scores / temperature, -np.inf))
        same = np.searchsorted(sorted_label, label, "right") - \
            np.searchsorted(sorted_label, label, "left")
        rest = len(reference_label) - same - top.sum(1)  # references outside the candidates
        drop = sample_label[None, :] == label[:, None]
        at = np.minimum(np.searchsorted(sample, found), len(sample) - 1)
        hit = top & (sample[at] == found)
        drop[np.nonzero(hit)[0], at[hit]] = True  # counted among the candidates already
        kept = (~drop).sum(1)
        logits = (torch.from_numpy(np.ascontiguousarray(q)) @ sample_vectors.T) / temperature
        logits.masked_fill_(torch.from_numpy(drop), float("-inf"))
        tail = torch.logsumexp(logits, dim=1).double().numpy()
        with np.errstate(divide="ignore"):
            tail = tail + np.log(np.maximum(rest, 0)) - np.log(np.maximum(kept, 1))
        tail[(kept == 0) | (rest <= 0)] = -np.inf
        out[start:start + len(q)] = np.logaddexp(top_lse, tail)
    return out


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of ``(n, m)``; -inf for a row of -inf."""
    peak = x.max(axis=1)
    safe = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(x - safe[:, None]).sum(axis=1))


def tail_sample(n_references: int, n_queries: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of the references :func:`log_partition` averages the rest over: as
    many as the budget allows for ``n_queries`` queries (all when that many fit)."""
    from ncclean.stages import reference_cap

    size = reference_cap(n_queries)
    if n_references <= size:
        return np.arange(n_references)
    return np.sort(rng.choice(n_references, size, replace=False))


def specificity_arm(args) -> None:
    """The specificity stage beyond the budget: every candidate caption against a pool of
    ``--pool`` images, exactly (the whole pool: what the budget forbids), through the index (its
    nearest images exactly, the rest from a sample of the budget's size), and through a sample
    of the pool alone (today's fallback, without faiss); time and error in significance units."""
    import math

    import ncclean.stages.index as index_module
    from ncclean.stages import reference_cap

    rng = np.random.default_rng(args.seed)
    topics = unit(rng.standard_normal((max(1, args.pool // 1000), args.dim)))  # 1,000 each
    topic = rng.integers(0, len(topics), args.pool)
    images = unit(topics[topic] + rng.standard_normal((args.pool, args.dim)) / np.sqrt(args.dim))
    pick = rng.integers(0, args.pool, args.queries)
    # half the captions describe their image (near it), half only its topic (a collection
    # name: as near every image of the topic as its own)
    about = np.where(rng.random((args.queries, 1)) < 0.5, images[pick], topics[topic[pick]])
    texts = unit(about + 1.5 * rng.standard_normal((args.queries, args.dim)) / np.sqrt(args.dim))
    label, pool_label = pick, np.arange(args.pool)
    own = np.einsum("nd,nd->n", texts, images[pick])
    temperature, share, k = 0.02, 0.25, args.pool + 1

    def significance(others: np.ndarray, size: int) -> np.ndarray:
        log_p = own / temperature - np.logaddexp(own / temperature, others)
        return (log_p + math.log(size)) / (share * math.log(size))

    def blocked(pool_rows: np.ndarray) -> np.ndarray:
        """log-sum-exp of each caption's logits over ``pool_rows`` less its own image."""
        out = np.empty(args.queries)
        pool = torch.from_numpy(images[pool_rows])
        for at in range(0, args.queries, 2048):
            logits = (torch.from_numpy(texts[at:at + 2048]) @ pool.T) / temperature
            own_image = torch.from_numpy(pick[at:at + 2048, None] == pool_rows[None, :])
            out[at:at + 2048] = torch.logsumexp(logits.masked_fill(own_image, -math.inf), 1)
        return out

    start = time.perf_counter()
    exact = significance(blocked(np.arange(args.pool)), k)
    exact_time = time.perf_counter() - start

    start = time.perf_counter()
    index = index_module.ReferenceIndex(images)
    build = time.perf_counter() - start
    sample = tail_sample(args.pool, args.queries, np.random.default_rng(0))
    start = time.perf_counter()
    indexed = significance(log_partition(index, texts, label, pool_label,
                                                      temperature, sample), k)
    index_time = time.perf_counter() - start

    size = min(args.pool, reference_cap(args.queries))  # today's fallback: a smaller pool
    start = time.perf_counter()
    sub = np.sort(np.random.default_rng(0).choice(args.pool, size, replace=False))
    sampled = significance(blocked(sub), size + 1)
    sample_time = time.perf_counter() - start
    print(f"pool={args.pool} candidates={args.queries} budget sample={len(sample)} threads=1 "
          f"significant (exact)={np.mean(exact >= 1):.3f}")
    print("| arm | build (s) | time (s) | mean abs error | max abs error | "
          "same side of 1 |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| exact, whole pool | — | {exact_time:.1f} | 0 | 0 | 1 |")
    for name, b, t, v in (("index + sampled rest", f"{build:.1f}", index_time, indexed),
                          (f"pool sample of {size} (no faiss)", "—", sample_time, sampled)):
        err = np.abs(v - exact)
        print(f"| {name} | {b} | {t:.1f} | {err.mean():.4f} | {err.max():.4f} | "
              f"{np.mean((v >= 1) == (exact >= 1)):.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--donors", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", nargs="+", default=["clustered", "diffuse"])
    parser.add_argument("--libraries", nargs="+",
                        default=["faiss", "usearch", "faiss-ivf", "faiss-ivf-sq8"])
    parser.add_argument("--m", type=int, nargs="+",
                        help="HNSW: links per node (default 32); faiss-ivf: lists per "
                        "sqrt(donors) (default 4)")
    parser.add_argument("--ef-add", type=int, default=128)
    parser.add_argument("--ef-search", type=int, nargs="+",
                        help="HNSW: the search's candidate list (default 64 128 256); "
                        "faiss-ivf: lists probed (default 8 16 32)")
    parser.add_argument("--k", type=int, default=16, help="candidates reranked exactly")
    parser.add_argument("--pool", type=int, default=0,
                        help="measure the specificity stage on a pool of this many images "
                        "against --queries candidates instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.pool:
        specificity_arm(args)
        return
    print(f"donors={args.donors} queries={args.queries} dim={args.dim} seed={args.seed} "
          f"ef_add={args.ef_add} k={args.k} threads=1")
    print("| data | library | M | ef_search | build (s) | query (s) | exact (s) | "
          "recall@1 | reranked | score gap | index (MB) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    runners = {"faiss": run_faiss, "usearch": run_usearch, "faiss-ivf": run_faiss_ivf,
               "faiss-ivf-sq8": lambda *a: run_faiss_ivf(*a, sq8=True)}
    for kind in args.data:
        donors, queries = make_data(kind, args.donors, args.queries, args.dim, args.seed)
        start = time.perf_counter()
        truth = exact_top(donors, queries)
        exact = time.perf_counter() - start
        for library in args.libraries:
            ivf = library.startswith("faiss-ivf")
            for m in args.m or ([4] if ivf else [32]):
                for build, size, ef, query, found in runners[library](
                        donors, queries, m, args.ef_add,
                        args.ef_search or ([8, 16, 32] if ivf else [64, 128, 256]), args.k):
                    recall = float(np.mean(found[:, 0] == truth))
                    best = rerank(donors, queries, found)
                    reranked = float(np.mean(best == truth))
                    gap = score_gap(donors, queries, best, truth)
                    print(f"| {kind} | {library} | {m} | {ef} | {build:.1f} | {query:.2f} | "
                          f"{exact:.2f} | {recall:.4f} | {reranked:.4f} | {gap:.4f} | "
                          f"{size / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
