"""The same policy words are the same policy on every path that takes them: `levelfield run`,
`sweep` and `campaign` (all three build a RunConfig from their options), the hosted sandbox's
options, Harbor's `--ek` and Inspect's sandbox config. Each path is run over one table of words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from levelfield.config import RunConfig
from levelfield.errors import InputError
from levelfield.harbor.options import parse_options
from levelfield.hosted.options import HostedOptions
from levelfield.inspect.config import sandbox_config
from levelfield.policy import PRESETS, Policy, parse_bound, policy_from_words

Words = dict[str, str]


def _run_config(words: Words) -> Policy:
    given: dict[str, object] = {k: v for k, v in words.items() if k != "policy"}
    if "policy" in words:
        given["policies"] = [words["policy"]]
    config = RunConfig.model_validate({"dataset": Path("d"), "out": Path("o"), **given})
    (policy,) = config.resolved_policies()
    return policy


PATHS: dict[str, Callable[[Words], Policy]] = {
    "policy_from_words": lambda words: policy_from_words(**words),
    "run/sweep/campaign": _run_config,
    "hosted": lambda words: HostedOptions.model_validate(words).resolved_policy(),
    "harbor --ek": lambda words: parse_options(dict(words)).resolved_policy(),
    "inspect": lambda words: sandbox_config(dict(words)).resolved_policy(),
}

# words → (policy name, memory ceiling as a user would write it)
WORDS: list[tuple[Words, str, str | None]] = [
    ({}, "strict", "1x"),
    ({"policy": "strict"}, "strict", "1x"),
    ({"policy": "headroom"}, "headroom", "3x"),
    ({"policy": "uncapped"}, "uncapped", None),
    ({"policy": "3x"}, "headroom", "3x"),
    ({"policy": "2.5x"}, "1x/2.5x", "2.5x"),
    ({"policy": "1x/2x"}, "1x/2x", "2x"),
    ({"policy": "none"}, "uncapped", None),
    ({"floor": "2x"}, "2x/none", None),  # a floor alone has no ceiling
    ({"floor": "1x"}, "uncapped", None),
    ({"ceiling": "3x"}, "headroom", "3x"),  # a ceiling alone has floor 1x
    ({"ceiling": "none"}, "uncapped", None),
    ({"floor": "1x", "ceiling": "3x"}, "headroom", "3x"),
    ({"floor": "1x", "ceiling": "1x"}, "strict", "1x"),
    ({"floor": "2x", "ceiling": "2x"}, "2x/2x", "2x"),
    ({"floor": "memory=1g", "ceiling": "memory=4g,cpus=2"}, "memory=1g/memory=4g,cpus=2", "4g"),
]

BAD: list[tuple[Words, str]] = [
    ({"policy": "loose"}, "unknown policy 'loose'"),
    ({"policy": "3x", "ceiling": "2x"}, "not both"),
    ({"policy": "strict", "floor": "1x"}, "not both"),
    ({"floor": "4x", "ceiling": "2x"}, "above its ceiling"),
    ({"floor": "4g"}, "name its resource"),
    ({"ceiling": "memory=lots"}, "cannot read"),
    ({"ceiling": "disk=4g"}, "resources are memory, cpus, storage"),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("words", "name", "memory_ceiling"), WORDS)
def test_every_path_reads_the_same_words_as_the_same_policy(
    path: str, words: Words, name: str, memory_ceiling: str | None
) -> None:
    policy = PATHS[path](words)
    reference = policy_from_words(**words)
    assert policy.describe() == reference.describe() and policy.name == reference.name == name
    expected = parse_bound(memory_ceiling, "memory") if memory_ceiling else None
    assert policy.bounds("memory")[1] == expected
    if name in PRESETS:
        assert policy is PRESETS[name]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("words", "said"), BAD)
def test_every_path_refuses_the_same_bad_words_saying_why(
    path: str, words: Words, said: str
) -> None:
    with pytest.raises((InputError, ValidationError), match=said):
        PATHS[path](words)
