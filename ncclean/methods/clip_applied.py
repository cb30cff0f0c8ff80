"""How a ``clip`` fit scores new pairs (the shards beyond its sample, or a saved fit applied):
the caption vectors centred per writing system as the fit's were, the fit's CCA, the discount
of a caption the fit took for a convention and the neighbours' agreement among the fitted
pairs, read on the sample's own table (:mod:`ncclean.methods.clip`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ncclean.methods import neighbours as near
from ncclean.methods.align import Alignment
from ncclean.methods.applied import Application, Kept, signal_table
from ncclean.methods.clip_widths import PRIMARY, WIDTHS
from ncclean.methods.scripts import ScriptCentring
from ncclean.methods.unit import raw_embeddings
from ncclean.models.features import Features
from ncclean.train.scoring import Embeddings, embed

#: The prefix of each averaged width's arrays in a saved fit (``widths.0.align.image_mean``;
#: the primary width's are the fit's own, only its table prefixed).
MEMBER = "widths."


def held_once(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """Drop from ``arrays`` each width's copy of a neighbours' table (the fitted pairs, the prior)
    that an earlier width already holds with the same values: they are read from the vectors,
    not the width's CCA, so four copies would only quadruple a fit. Returns each dropped name
    with the name that holds its values."""
    first: dict[str, str] = {}
    same: dict[str, str] = {}
    for name in sorted(arrays, key=lambda n: (n.startswith(MEMBER), n)):  # the primary's first
        table = name.split(".", 2)[2] if name.startswith(MEMBER) else name
        if not table.startswith("neighbours.") or table == "neighbours.shape":
            continue
        held = first.setdefault(table, name)
        if held != name and arrays[held].dtype == arrays[name].dtype \
                and np.array_equal(arrays[held], arrays[name]):
            same[name] = held
    for name in same:
        del arrays[name]
    return same


class ClipSimilarity(Application):
    """``clip``'s application: a new pair's ``clip_sim`` is the cosine of its unit vectors (after
    the fit's CCA when there is one; a loaded matcher's embeddings when one was loaded); a
    caption the fit discounted as a convention (a repeated caption of the sample) loses the same
    discount, any other none; ``clean_prob`` is read from the sample's own table of that signal
    (the null's local false discovery rate, the mixture's posterior or the top-fraction rule):
    the space was not trained on the sample's pairs, so no held-out calibration is needed."""

    needs_matcher = False
    held_out = False

    def sample_embeddings(self, result, features, device: str) -> Embeddings:
        return result.embeddings

    def keep(self, method, result, features, embeddings, clean_prob, caption_key, seed) -> Kept:
        kept = self._keep_one(result, clean_prob, caption_key)
        if not result.members:
            return kept
        # clip_widths' average: each width kept whole with its own table (the primary width's
        # arrays are the fit's own, so stored once); the signal of a pair is then the mean of
        # the widths' probabilities, which is its clean_prob
        primary = WIDTHS.index(PRIMARY)
        for k, member in enumerate(result.members):
            one = kept if k == primary else self._keep_one(replace(member, scripts=None),
                                                           member.clean_prob, caption_key)
            if k != primary:
                kept.arrays |= {f"{MEMBER}{k}.{name}": value for name, value in
                                one.arrays.items()}
            kept.arrays[f"{MEMBER}{k}.table.x"], kept.arrays[f"{MEMBER}{k}.table.y"] = \
                signal_table(one.signal, member.clean_prob)
        kept.meta["averaged_widths"] = [member.alignment.dims for member in result.members]
        kept.meta["averaged_primary"] = primary
        kept.meta["same_as"] = held_once(kept.arrays)
        kept.meta["signal"] = f"the mean clean_prob of {len(result.members)} widths"
        prob = np.asarray(clean_prob, np.float64)
        return replace(kept, signal=prob, prob=prob)

    def _keep_one(self, result, clean_prob, caption_key) -> Kept:
        arrays: dict[str, np.ndarray] = {}
        meta: dict = {"signal": "clip_sim", "space": "raw" if result.matcher is None else
                      "matcher"}
        if result.scripts is not None:  # the caption vectors' shifts, before the CCA
            arrays.update(result.scripts.arrays())
            meta["scripts"] = result.scripts.describe()
        if result.alignment is not None:  # the CCA clip fitted, kept for the applied pairs
            for name in ("image_mean", "text_mean", "image_projection", "text_projection"):
                arrays[f"align.{name}"] = np.asarray(getattr(result.alignment, name))
            meta["alignment"] = result.alignment.describe()
        signal = np.asarray(result.columns["clip_sim"], dtype=np.float64)
        if "clip_convention" in result.columns:  # a repeated caption's discount holds for all
            discount = np.asarray(result.columns["clip_convention"], dtype=np.float64)
            keys, first, counts = np.unique(caption_key, return_index=True, return_counts=True)
            kept = (counts > 1) & (discount[first] > 0)
            arrays["convention.key"] = keys[kept]
            arrays["convention.discount"] = discount[first][kept]
            meta["signal"] = "clip_sim - clip_convention"
            signal = signal - discount
        if result.neighbourhood is not None:  # the fitted pairs, each new pair's neighbours
            arrays.update(result.neighbourhood.arrays())
            meta["signal"] += " + clip_neighbours"
            signal = signal + np.asarray(result.columns["clip_neighbours"], dtype=np.float64)
        return Kept(signal, np.asarray(clean_prob, np.float64), arrays, meta,
                    keeps_matcher=result.matcher is not None)

    def prepared(self, arrays, features: Features) -> Features:
        """``features`` with their caption vectors centred as the fit's were, if they were."""
        centring = ScriptCentring.from_arrays(arrays)
        return features if centring is None else centring.apply(features)

    def embeddings(self, arrays, matcher, features, device: str) -> Embeddings:
        if matcher is not None:
            return embed(matcher, features, device, dtype=np.float32)
        raw = raw_embeddings(features)
        if "align.image_mean" not in arrays:
            return raw
        alignment = Alignment(arrays["align.image_mean"], arrays["align.text_mean"],
                              arrays["align.image_projection"], arrays["align.text_projection"],
                              np.zeros(0), 0.0)
        return Embeddings(images=alignment.project_images(raw.images),
                          texts=alignment.project_texts(raw.texts))

    def signal(self, arrays, meta, features, embeddings, columns, new, caption_key) -> np.ndarray:
        if "averaged_widths" not in meta:
            return self._signal_one(arrays, features, embeddings, columns, new, caption_key)
        arrays = {**arrays, **{name: arrays[held] for name, held in
                               meta.get("same_as", {}).items()}}
        primary = meta.get("averaged_primary")  # absent: every width's arrays are prefixed
        if primary is None:
            self._signal_one(arrays, features, embeddings, columns, new, caption_key)
        probs = []
        for k in range(len(meta["averaged_widths"])):
            prefix = f"{MEMBER}{k}."
            own = {name[len(prefix):]: value for name, value in arrays.items()
                   if name.startswith(prefix)}
            if k == primary:  # the fit's own arrays and embeddings, its columns the output's
                signal = self._signal_one(arrays, features, embeddings, columns, new,
                                          caption_key)
            else:
                scratch = {name: np.empty_like(column) for name, column in columns.items()}
                signal = self._signal_one(own, features,
                                          self.embeddings(own, None, features, "cpu"), scratch,
                                          new, caption_key)
            probs.append(np.interp(signal, own["table.x"], own["table.y"]))
        return np.mean(probs, axis=0)

    def _signal_one(self, arrays, features, embeddings, columns, new, caption_key) -> np.ndarray:
        from ncclean.data.shards import find_sorted

        similarity = embeddings.pair_similarity(features)
        columns["clip_sim"][new] = similarity
        signal = similarity.astype(np.float64)
        if "clip_convention" in columns:  # the fit's discount of a repeated caption, else none
            at, seen = find_sorted(arrays["convention.key"], caption_key)
            discount = np.zeros(len(caption_key))
            discount[seen] = arrays["convention.discount"][at[seen]]
            columns["clip_convention"][new] = discount
            signal -= discount
        if (hood := near.Neighbourhood.from_arrays(arrays)) is not None:
            term = hood.score_new(features.image_data, features.text_data, features.image_group,
                                  features.text_group)
            columns["clip_neighbours"][new] = term
            signal += term
        return signal
