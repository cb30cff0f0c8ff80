"""Labelling pairs in a page from the keyboard: the style, the bar and the script shared by the
report (:mod:`ncclean.report.html`) and the audit sheet (:mod:`ncclean.report.audit`). Each
``.pair`` element (``data-id``) takes ``m`` match, ``x`` mismatch, ``g`` generic or ``p``
partial, ``j``/``k`` move; the labels are kept in the browser and exported as ``labels.csv``
(``id,label``), which ``ncclean audit --labels`` reads."""

from __future__ import annotations

import json
from html import escape

LABEL_STYLE = """
.pair:focus,.pair.current{outline:3px solid #264653}
.pair[data-label=match]{border-color:#2a9d8f}.pair[data-label=mismatch]{border-color:#e76f51}
.pair[data-label=generic]{border-color:#e9c46a}.pair[data-label=partial]{border-color:#8ab17d}
.label{font-weight:bold}
#bar{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ddd;z-index:1}
"""


def label_bar(title: str, n: int, links: str = "") -> str:
    """The sticky bar of a page whose ``.pair`` elements are labelled from the keyboard."""
    return (f'<div id="bar"><b>{escape(title)}</b> · {n} pairs{links} · keys: <b>m</b> match, '
            '<b>x</b> mismatch, <b>g</b> generic, <b>p</b> partial, <b>j</b>/<b>k</b> '
            'next/previous · <span id="done">0</span> labelled · '
            '<button id="export">Export labels.csv</button></div>')


def label_script(page: str) -> str:
    """The script that labels a page's ``.pair`` elements (``data-id``) from the keyboard,
    keeps the labels in the browser under ``page`` and exports them as ``labels.csv``."""
    key = json.dumps("ncclean-labels:" + page).replace("</", "<\\/")
    return "<script>const key = " + key + ";\n" + _SCRIPT + "</script>"


_SCRIPT = """
let saved = {};
try { saved = JSON.parse(localStorage.getItem(key) || "{}"); } catch (e) {}
const pairs = Array.from(document.querySelectorAll(".pair"));
let current = 0;
function show() {
  let done = 0;
  pairs.forEach((p, k) => {
    const label = saved[p.dataset.id] || "";
    p.dataset.label = label; p.querySelector(".label").textContent = label; if (label) done++;
    p.classList.toggle("current", k === current);
  });
  document.getElementById("done").textContent = done;
}
function go(k, move) {
  current = Math.min(pairs.length - 1, Math.max(0, k));
  const pair = pairs[current];
  if (pair && move) { pair.focus(); pair.scrollIntoView({block: "nearest"}); }
  show();
}
pairs.forEach((p, k) => p.addEventListener("click", () => go(k, true)));
const keys = {m: "match", x: "mismatch", g: "generic", p: "partial"};
document.addEventListener("keydown", (event) => {
  if (event.key === "j" || event.key === "k") {
    go(current + (event.key === "j" ? 1 : -1), true); return;
  }
  if (!(event.key in keys) || !pairs[current]) return;
  saved[pairs[current].dataset.id] = keys[event.key];
  try { localStorage.setItem(key, JSON.stringify(saved)); } catch (e) {}
  go(current + 1, true);
});
function csv(value) { return '"' + String(value).replace(/"/g, '""') + '"'; }
document.getElementById("export").addEventListener("click", () => {
  const lines = ["id,label"].concat(pairs.filter(p => saved[p.dataset.id])
    .map(p => csv(p.dataset.id) + "," + saved[p.dataset.id]));
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([lines.join("\\n") + "\\n"], {type: "text/csv"}));
  link.download = "labels.csv"; document.body.appendChild(link); link.click(); link.remove();
});
go(0, false);
"""
