"""No constant of the twin or the hardware models is fitted to a result it is meant to predict
(issue 15): every ``Sourced`` constant the twin reads names where its value comes from, and no
source says "fitted". A constant derived from a spec, a datasheet or a micro-benchmark says so;
one tuned until a DSCS figure came out would be circular, and this test refuses it."""

from __future__ import annotations

import re

from nearfaas.twin import uncertainty


def _every_constant():
    uncertain, other, _sites = uncertainty._scan(None)
    return uncertain + other


def test_every_constant_has_a_source_and_none_is_fitted():
    constants = _every_constant()
    assert len(constants) > 50, "the scan found too few constants: it no longer reaches the model"
    fitted = [f"{c.module}.{c.name}: {c.sourced.source!r}" for c in constants if re.search(r"\bfit(ted|ting)?\b", c.sourced.source, re.I)]
    assert not fitted, "constants whose source says they were fitted:\n" + "\n".join(fitted)
    assert all(c.sourced.source.strip() for c in constants)


def test_the_check_would_catch_a_fitted_constant(monkeypatch):
    from nearfaas.hw.sourced import Sourced
    from nearfaas.twin import power

    monkeypatch.setattr(power, "FITTED_FOR_TEST", Sourced(1.0, "fitted to the DSCS Fig. 9 speedup", "assumption", (0.5, 2.0)),
                        raising=False)
    names = {f"{c.module}.{c.name}" for c in _every_constant() if "fitted" in c.sourced.source}
    assert "nearfaas.twin.power.FITTED_FOR_TEST" in names
