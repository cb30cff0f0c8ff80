import sys
from dataclasses import dataclass, replace
from importlib import metadata
from typing import ClassVar

import numpy as np
import pytest

from ncclean.errors import BadOptionError
from ncclean.methods import base
from ncclean.methods.base import (
    Context,
    Method,
    MethodResult,
    UnknownMethodError,
    available_methods,
    get_method,
    make_method,
)
from ncclean.methods.crcl import CRCL
from ncclean.methods.gmm import GMM
from ncclean.testing import tiny_features


@dataclass
class Constant(Method):
    """A plugin that calls every pair clean (for registry tests)."""

    name: ClassVar[str] = "constant"
    summary: ClassVar[str] = "every pair is clean"
    trains_matcher: ClassVar[bool] = False
    level: float = 1.0

    def fit(self, features, context):
        import numpy as np

        return MethodResult(clean_prob=np.full(features.n_pairs, self.level))


def fake_entry_points(*pairs):
    entries = [metadata.EntryPoint(name, value, base.ENTRY_POINT_GROUP) for name, value in pairs]
    return lambda group: [e for e in entries if e.group == group]


def test_builtin_gmm_is_registered():
    assert get_method("gmm") is GMM
    assert "gmm" in available_methods()


def test_unknown_method_lists_the_valid_ones():
    with pytest.raises(UnknownMethodError, match="unknown method 'ncr'; valid methods: .*gmm"):
        get_method("ncr")


def test_plugins_come_from_entry_points(monkeypatch):
    monkeypatch.setattr(metadata, "entry_points",
                        fake_entry_points(("constant", f"{__name__}:Constant")))
    assert get_method("constant") is Constant
    assert make_method("constant", {"level": "0.25"}).level == 0.25


def test_clashing_names_fail_with_the_valid_ones(monkeypatch):
    monkeypatch.setattr(metadata, "entry_points", fake_entry_points(
        ("gmm", f"{__name__}:Constant"), ("constant", f"{__name__}:Constant")))
    with pytest.raises(UnknownMethodError, match="claimed more than once") as raised:
        get_method("gmm")
    valid = str(raised.value).split("valid methods: ")[1].split(", ")
    assert "constant" in valid and "gmm" not in valid


def test_a_plugin_that_is_not_a_method(monkeypatch):
    monkeypatch.setattr(metadata, "entry_points", fake_entry_points(("odd", "json:dumps")))
    with pytest.raises(UnknownMethodError, match="not an ncclean Method"):
        get_method("odd")


def test_make_method_parses_strings_to_field_types():
    method = make_method("gmm", {"epochs": "3", "margin": "0.1", "negatives": "batches",
                                 "warmup-epochs": "auto"})
    assert (method.epochs, method.margin, method.negatives, method.warmup_epochs) == \
        (3, 0.1, "batches", None)
    assert method.params()["margin"] == 0.1
    with pytest.raises(BadOptionError, match="no parameter 'epoch'.*warmup_epochs"):
        make_method("gmm", {"epoch": "3"})
    with pytest.raises(BadOptionError, match="'epochs'"):
        make_method("gmm", {"epochs": "many"})


@pytest.mark.parametrize("method, rule", [
    (GMM(warmup_epochs=1, epochs=2, batch_size=32, pool_size=64), "schedule"),
    (CRCL(pieces=(2, 2), freeze_epochs=1, batch_size=32), "pieces_for"),
])
def test_a_head_on_fixed_image_vectors_gets_the_short_epoch_rule(monkeypatch, method, rule):
    """The methods tell their epoch rule whether the image tower reads fixed vectors."""
    features, config, _ = tiny_features(n_images=12)
    pixels = features.image_data.reshape(len(features.image_data), -1)
    vectors = replace(features, image_data=pixels[:, :48].astype(np.float32))
    column = replace(config, image_tower="column", image_in_dim=48)
    code = sys.modules[type(method).__module__]
    seen = []
    real = getattr(code, rule)
    monkeypatch.setattr(code, rule, lambda *args: seen.append(args[-1]) or real(*args))
    for pairs, matcher in ((features, config), (vectors, column)):
        method.fit(pairs, Context(seed=0, matcher_config=matcher))
    assert seen == [False, True]
    assert replace(config, image_tower="clip").frozen_images
    assert not replace(config, image_tower="clip", finetune="full").frozen_images
