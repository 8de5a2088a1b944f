"""The x-nearfaas.memory block (spec/options.py): defaults, a JSON round trip, and errors that
name the field and the fix."""

from __future__ import annotations

import pytest

from nearfaas.spec.errors import SpecError
from nearfaas.spec.options import NearfaasOptions


def test_defaults_and_round_trip():
    opts = NearfaasOptions.from_dict({"memory": {"profile": True}})
    assert opts.memory == {"profile": True, "sample_ms": 50}
    assert NearfaasOptions.from_dict(opts.to_dict()) == opts
    plain = NearfaasOptions.from_dict({})
    assert plain.memory is None and NearfaasOptions.from_dict(plain.to_dict()) == plain


@pytest.mark.parametrize("block, words", [({"profile": "maybe"}, "memory.profile"), ({"sample_ms": -1}, "memory.sample_ms"),
                                          ({"sample_ms": 10**6}, "0 (allocations only) to 10000"),
                                          ({"profle": True}, 'did you mean "profile"'), (3, "x-nearfaas.memory")])
def test_bad_blocks_name_the_field(block, words):
    with pytest.raises(SpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
        NearfaasOptions.from_dict({"memory": block})
