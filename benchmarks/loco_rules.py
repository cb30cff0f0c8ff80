"""Leave-one-corpus-out tables of the default's automatic rules, from ``rule_variants.py``'s runs.

A *setting* is one rule for each of ``clip``'s automatic choices with a CCA: which corpora are
ranked cross-fitted (``rank``), which have their captions discounted (``conventions``), how
strongly the CCA is shrunk (``align_ridge``) and how many directions it keeps (``align_dims``).
Each rule reads signals of the corpus (``<runs>.entries.json``): its pairs, its *entries* (the
fewer of its distinct captions and distinct images, in widths of the vectors) or its *convention
share* (the share of pairs whose caption three or more pairs carry). A setting's score on a
corpus is the run measured with exactly what it picks there (none where that was not measured).

For each rule, every corpus in turn is held out: of the rule's variants (the others held at the
proposed setting), the one with the best mean score on the other corpora is chosen (among the
variants measured on at least half of them, compared where all of those were), and its score
on the held-out corpus is set beside the best variant there and the current default's. A corpus's
smaller copies (``--sizes`` of ``rule_variants.py``) are held out with it, each its own row, so
that a size rule is never chosen on a copy of the corpus it is scored on; clip art's 300-pair
sample is clip art's (the families of ``loco.py``). Scores are means over the noise ratios and
seeds measured (AUROC of ``clean_prob`` against ``noisy_gt``). The cut's recall bands and queue
do not change the order: their table scores the balanced accuracy of the review queue (the mean
of the share of clean pairs kept clean and the share of the noise queued) on the current
default's scores.

    python benchmarks/loco_rules.py benchmarks/results/rule-variants.jsonl > tables.md
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
from loco import family

#: The summed width of the default's two vectors (ImageNet EfficientNet-Lite0 1,280 + e5 384).
WIDTH = 1280 + 384
DEFAULT_CUT = "0.5/0.9/True"
CURRENT = {"rank": "pairs<3", "conventions": "always-discount", "ridge": "always-100",
           "dims": "always-128"}
PROPOSED = {"rank": "entries<0.25|share>=0.05&pairs<3", "conventions": "share>=0.05|entries<1",
            "ridge": "share<0.05&entries>=3->10;share<0.05&entries>=1->30",
            "dims": "share<0.05&entries>=2->256"}
#: The other rules while one is chosen: the proposed ones, at ridge 100 and 128 directions for
#: rank and conventions (their cross-fitted and discounted runs were measured there only).
HELD = {"rank": PROPOSED | {"ridge": "always-100", "dims": "always-128"},
        "conventions": PROPOSED | {"ridge": "always-100", "dims": "always-128"},
        "ridge": PROPOSED, "dims": PROPOSED}

Row = dict
Info = dict  # pairs, captions, images, convention_share


def instances(rows: list[Row]) -> dict[tuple[str, int], list[Row]]:
    """The runs of each (corpus, size) instance."""
    out: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in rows:
        out[(row["corpus"], row["size"])].append(row)
    return out


def mean_of(runs: list[Row], variant: str | None, read: Callable[[Row], float]) -> float | None:
    """The mean of ``read`` over ``runs`` of ``variant``, ``None`` when there is none."""
    values = [read(row) for row in runs if row["variant"] == variant]
    return float(np.mean(values)) if values else None


def _entries(info: Info) -> int:
    return min(info["captions"], info["images"])


def _clause(clause: str, info: Info) -> bool:
    """Whether one clause of a rank rule cross-fits: ``cross-fitted``, ``in-sample``,
    ``pairs<k``, ``entries<k`` (times the width) or ``share>=t&pairs<k``."""
    if clause in ("in-sample", "cross-fitted"):
        return clause == "cross-fitted"
    holds = True
    for condition in clause.split("&"):
        if condition.startswith("share>="):
            holds &= info["convention_share"] >= float(condition.removeprefix("share>="))
        else:
            signal, k = condition.split("<")
            count = info["pairs"] if signal == "pairs" else _entries(info)
            holds &= count < float(k) * WIDTH
    return holds


def pick(setting: dict, info: Info) -> tuple[str, str, float, int]:
    """The rank, conventions, ridge and directions ``setting`` picks for a corpus of ``info``."""
    rank = "cross-fitted" if any(_clause(clause, info) for clause in
                                 setting["rank"].split("|")) else "in-sample"
    rule = setting["conventions"]
    if rule.startswith("always-"):
        conventions = rule.removeprefix("always-")
    else:  # share>=t|entries<k: discount where any clause holds, else trust
        conventions = "discount" if any(_clause(clause, info) for clause in rule.split("|")) \
            else "trust"
    ridge = _valued(setting["ridge"], info, 100.0)
    dims = int(_valued(setting["dims"], info, 128))
    return rank, conventions, ridge, dims


def _valued(rule: str, info: Info, otherwise: float) -> float:
    """``always-v``, or ``;``-separated ``[share<t][&entries>=k]->v``: the ``v`` of the first
    whose conditions all hold, else ``otherwise``."""
    if rule.startswith("always-"):
        return float(rule.removeprefix("always-"))
    for part in rule.split(";"):
        conditions, value = part.split("->")
        if all(_holds(condition, info) for condition in conditions.split("&")):
            return float(value)
    return otherwise


def _holds(condition: str, info: Info) -> bool:
    if condition.startswith("share<"):
        return info["convention_share"] < float(condition.removeprefix("share<"))
    return _entries(info) >= float(condition.removeprefix("entries>=")) * WIDTH


def variants_of(rank: str, conventions: str, ridge: float, dims: int, info: Info) -> list[str]:
    """The ``rule_variants.py`` variants measured with this rank, conventions, ridge and
    directions, any one of which gives its score. A cross-fitted pair has nothing of its own to
    discount (there ``repeated`` is ``discount``); where no caption repeats, ``repeated``
    discounts nothing (there it is ``trust``)."""
    current = pick(CURRENT, info)
    if rank == "cross-fitted" and conventions == "repeated":
        conventions = "discount"
    same = [conventions]
    if info["captions"] == info["pairs"] and conventions in ("repeated", "trust"):
        same = ["trust", "repeated"]
    out = []
    for name in same:
        on_current = current[:2] == (rank, name)  # measured on top of the current default
        if dims == 128:
            if ridge == 100.0:
                out += [f"{rank}/{name}"] + (["default"] if on_current else [])
            else:
                out += [f"ridge={ridge:g}"] if on_current else []
                if rank == "in-sample" and name in ("repeated", "trust"):
                    out.append(f"{name}/ridge={ridge:g}")
        elif ridge == 100.0:
            out += [f"dims={dims}"] if on_current else []
            if rank == "in-sample" and name in ("repeated", "trust"):
                out.append(f"{name}/dims={dims}")
        elif rank == "in-sample" and name == "trust":
            out.append(f"trust/ridge={ridge:g}/dims={dims}")
    return out


def setting_score(setting: dict, runs: list[Row], info: Info) -> float | None:
    """The mean AUROC of the run ``setting`` picks on this corpus."""
    for name in variants_of(*pick(setting, info), info):
        value = mean_of(runs, name, lambda row: row["auroc"])
        if value is not None:
            return value
    return None


def loco_table(data: dict, scores: dict[str, Callable], default: str) \
        -> tuple[str, list[dict]]:
    """The variant chosen on all corpora and the rows of one rule's table (module docstring).
    ``scores``: variant name -> ``score(instance)``, ``None`` where not measured."""
    def chosen(on: list) -> str:
        # the variants measured on at least half of them, compared on those where all are
        names = [name for name, score in scores.items()
                 if 2 * sum(score(i) is not None for i in on) >= len(on) > 0]
        on = [i for i in on if all(scores[name](i) is not None for name in names)]
        means = {name: np.mean([scores[name](i) for i in on]) for name in names} if on else {}
        if not means:
            return "-"
        top = max(means.values())
        tied = [name for name in means if means[name] >= top - 1e-9]
        return " = ".join(sorted(tied, key=lambda name: name != default))

    out = []
    for instance in sorted(data, key=lambda i: (i[0], -i[1] if i[1] else -10**9)):
        others = [i for i in data if family(i[0]) != family(instance[0])]
        choice = chosen(others)
        here = {name: score(instance) for name, score in scores.items()}
        here = {name: value for name, value in here.items() if value is not None}
        if not here:
            continue
        best = max(here, key=lambda name: (here[name], name == default))
        first = choice.split(" = ")[0]  # tied variants score alike on the others, not here
        scored = {here[name] for name in choice.split(" = ") if name in here}
        out.append({"corpus": instance[0], "size": instance[1], "chosen": choice,
                    "chosen_score": here.get(first), "chosen_range": sorted(scored),
                    "best": best, "best_score": here[best],
                    "default_score": here.get(default), "all": here})
    return chosen(list(data)), out


def render(title: str, rows: list[dict], on_all: str, default: str, info: dict) -> str:
    """One rule's table in Markdown."""
    lines = [f"### {title}", "", f"Chosen on all corpora: **{on_all}** (current default: "
             f"{default}).", "", "| held-out corpus | pairs | chosen on the others | its AUROC "
             "| best here | best's AUROC | current default's AUROC | chosen - best (worst tie) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        tied = row["chosen"].split(" = ")
        if len(tied) > 2:
            row = row | {"chosen": f"{' = '.join(tied[:2])} (+{len(tied) - 2} tied)"}
        scored, best = row["chosen_range"], row["best_score"]  # tied choices: their range
        gap = "-" if not scored else f"{scored[0] - best:+.4f}"
        its = "-" if not scored else " - ".join(dict.fromkeys(f"{v:.4f}" for v in scored))
        lines.append(f"| {_name(row['corpus'], row['size'])} | "
                     f"{info[(row['corpus'], row['size'])]['pairs']:,} | {row['chosen']} | "
                     f"{its} | {row['best']} | {_num(row['best_score'])} | "
                     f"{_num(row['default_score'])} | {gap} |")
    return "\n".join(lines) + "\n"


def _name(corpus: str, size: int) -> str:
    return corpus + ("" if not size else f" ({size:,} subset)")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


RULES = {
    "rank": ["in-sample", "cross-fitted", "pairs<1", "pairs<3", "entries<0.5", "entries<1",
             "share>=0.05&pairs<3", "entries<0.25|share>=0.05&pairs<3",
             "entries<0.5|share>=0.05&pairs<3", "entries<1|share>=0.05&pairs<3"],
    "conventions": ["always-discount", "always-repeated", "always-trust", "share>=0.05",
                    "share>=0.05|entries<0.5", "share>=0.05|entries<1",
                    "share>=0.05|entries<2"],
    "ridge": ["always-30", "always-100", "always-300", "share<0.05->30",
              "share<0.05&entries>=1->30", "share<0.05&entries>=1->10",
              "share<0.05&entries>=2->10;share<0.05&entries>=1->30",
              "share<0.05&entries>=3->10;share<0.05&entries>=1->30",
              "share<0.05&entries>=4->10;share<0.05&entries>=1->30"],
    "dims": ["always-64", "always-128", "always-256", "share<0.05&entries>=1->256",
             "share<0.05&entries>=2->256", "share<0.05&entries>=3->256",
             "share<0.05&entries>=2->384"],
}


def cut_score(name: str, runs: list[Row]) -> float | None:
    """Balanced accuracy of cut ``name`` (``rule_variants.CUTS``) on the current default's runs."""
    def balanced(row: Row) -> float:
        cut = row["cuts"][name]
        return (cut["clean_kept"] + cut["noise_queued"]) / 2
    return mean_of(runs, "default", balanced)


def summary(data: dict, info: dict) -> str:
    """Per corpus: the current default, the proposed one, and the best variant measured."""
    lines = ["### The default against the best variant measured (AUROC)", "",
             f"Current: {CURRENT}; proposed: {PROPOSED}.", "",
             "| corpus | pairs | distinct captions / images | convention share | current "
             "default | proposed | best variant measured | its AUROC | proposed - best |",
             "|---|---|---|---|---|---|---|---|---|"]
    for instance in sorted(data, key=lambda i: (i[0], -i[1] if i[1] else -10**9)):
        runs, here = data[instance], info[instance]
        means = {v: mean_of(runs, v, lambda row: row["auroc"])
                 for v in sorted({row["variant"] for row in runs})}
        current = setting_score(CURRENT, runs, here)
        proposed = setting_score(PROPOSED, runs, here)
        best = max(means, key=lambda v: (means[v], v == "default"))  # a tie names the default
        gap = "-" if proposed is None else f"{proposed - means[best]:+.4f}"
        lines.append(f"| {_name(*instance)} | {here['pairs']:,} | {here['captions']:,} / "
                     f"{here['images']:,} | {here['convention_share']:.2f} | {_num(current)} | "
                     f"{_num(proposed)} | {best} | {means[best]:.4f} | {gap} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="rule_variants.py's JSON lines")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="the seeds whose runs count (every variant was run at seed 0)")
    parser.add_argument("--json", type=Path, help="also write the tables' rows here")
    args = parser.parse_args()
    rows = [row for line in args.runs.read_text().splitlines()
            if (row := json.loads(line))["seed"] in args.seeds]
    described = json.loads(args.runs.with_suffix(".entries.json").read_text())
    data = instances(rows)
    info = {instance: described[f"{instance[0]}/{instance[1]}"] for instance in data}
    print(summary(data, info))
    tables = {}
    for rule, names in RULES.items():
        held = HELD[rule]
        scores = {name: (lambda i, setting=held | {rule: name}: setting_score(
            setting, data[i], info[i])) for name in names}
        on_all, table = loco_table(data, scores, CURRENT[rule])
        tables[rule] = {"chosen_on_all": on_all, "rows": table}
        others = ", ".join(f"{name} {value}" for name, value in held.items() if name != rule)
        print(render(f"{rule} ({others})", table, on_all, CURRENT[rule], info))
    cuts = sorted({name for runs in data.values() for row in runs
                   if row["variant"] == "default" for name in row["cuts"]})
    scores = {name: (lambda i, name=name: cut_score(name, data[i])) for name in cuts}
    on_all, table = loco_table(data, scores, DEFAULT_CUT)
    tables["cut"] = {"chosen_on_all": on_all, "rows": table}
    print(render("cut: noisy_recall / review_recall / queue_by_estimate (balanced accuracy of "
                 "the review queue, not AUROC; on the current default's scores)", table, on_all,
                 DEFAULT_CUT, info).replace("AUROC", "score"))
    if args.json:
        args.json.write_text(json.dumps(tables, indent=1))


if __name__ == "__main__":
    main()
