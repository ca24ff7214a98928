import math

import pytest
from pydantic import ValidationError

from levelfield.errors import PolicyError
from levelfield.policy import (
    PRESETS,
    Policy,
    ResourceBounds,
    apply_policy,
    parse_bound,
    policy_from_bounds,
    resolve_policy,
)
from levelfield.tasks import Spec

SPEC = Spec(cpus=1.0, memory_bytes=512 << 20, storage_bytes=1 << 30)


@pytest.mark.parametrize(
    ("text", "resource", "multiple", "absolute"),
    [
        ("1x", "memory", 1.0, None),
        ("2.5x", "cpus", 2.5, None),
        ("4g", "memory", None, 4 << 30),
        ("512m", "storage", None, 512 << 20),
        ("2cpu", "cpus", None, 2.0),
        ("1.5", "cpus", None, 1.5),
    ],
)
def test_bounds_parse(
    text: str, resource: str, multiple: float | None, absolute: float | None
) -> None:
    bound = parse_bound(text, resource)  # type: ignore[arg-type]
    assert bound is not None and (bound.multiple, bound.absolute) == (multiple, absolute)


def test_none_is_uncapped_and_garbage_is_refused() -> None:
    assert parse_bound("none", "memory") is None
    with pytest.raises(PolicyError, match="memory: cannot read 'lots'"):
        parse_bound("lots", "memory")
    with pytest.raises(PolicyError, match="positive"):
        parse_bound("0x", "cpus")


def test_presets_apply_as_kubernetes_would() -> None:
    strict = apply_policy(PRESETS["strict"], SPEC)
    assert strict.memory_floor_bytes == strict.memory_ceiling_bytes == 512 << 20
    assert strict.cpu_ceiling == 1.0 and strict.storage_ceiling_bytes == 1 << 30
    headroom = apply_policy(PRESETS["headroom"], SPEC)
    assert (
        headroom.memory_ceiling_bytes == 3 * (512 << 20)
        and headroom.memory_floor_bytes == 512 << 20
    )
    uncapped = apply_policy(PRESETS["uncapped"], SPEC)
    assert uncapped.memory_ceiling_bytes is None and uncapped.cpu_ceiling is None
    assert math.isinf(uncapped.memory_ceiling_multiple)
    assert uncapped.pids_max == 4096  # a fork bomb never takes the host


def test_floor_above_ceiling_is_refused_at_load() -> None:
    with pytest.raises(PolicyError, match="memory floor 2x is above its ceiling 1x"):
        Policy(name="bad", memory=ResourceBounds(floor="2x", ceiling="1x"))


def test_mixed_forms_are_checked_against_the_spec() -> None:
    policy = Policy(name="mixed", memory=ResourceBounds(floor="1g", ceiling="1x"))
    with pytest.raises(PolicyError, match="above its ceiling"):
        apply_policy(policy, SPEC)  # 1 GiB floor over a 512 MiB ceiling


def test_unknown_policy_keys_are_refused() -> None:
    with pytest.raises(ValidationError, match="celing"):
        Policy.model_validate({"name": "x", "memory": {"floor": "1x", "celing": "3x"}})


def test_policy_texts_resolve() -> None:
    assert resolve_policy("3x") is PRESETS["headroom"]  # bare multiplier = floor 1x
    assert resolve_policy("Strict") is PRESETS["strict"]
    assert resolve_policy("1x/none") is PRESETS["uncapped"]
    custom = resolve_policy("1.5x")
    assert custom.name == "1x/1.5x" and apply_policy(custom, SPEC).cpu_ceiling == 1.5
    assert policy_from_bounds("1x", "3x") is PRESETS["headroom"]
    with pytest.raises(PolicyError, match="unknown policy"):
        resolve_policy("generous")


def test_absolute_bounds_name_their_resource_and_ignore_the_spec() -> None:
    limits = apply_policy(policy_from_bounds("1x", "memory=4g,cpus=2cpu"), SPEC)
    assert limits.memory_ceiling_bytes == 4 << 30 and limits.memory_ceiling_multiple == 8.0
    assert limits.cpu_ceiling == 2.0 and limits.storage_ceiling_bytes == SPEC.storage_bytes
    with pytest.raises(PolicyError, match="name its resource"):
        policy_from_bounds("1x", "4g")
