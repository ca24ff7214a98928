"""Spec × policy → limits: how a task's resource spec becomes what the kernel enforces.

A policy gives, per resource, a **floor** (guaranteed: memory soft limit, CPU shares, host
admission) and a **ceiling** (where the kernel kills or throttles), each a multiple of the spec
("1x", "2.5x") or absolute ("4g", "2cpu"); a ceiling of `none` is uncapped. Mixed forms (floor
"4g", ceiling "2x") can only be checked against a spec, so `plan.py` applies every policy to every
task before the first trial starts: a floor above its ceiling is refused at load, not at trial 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from levelfield._units import parse_bytes
from levelfield.errors import PolicyError
from levelfield.tasks import Spec

Resource = Literal["memory", "cpus", "storage"]
RESOURCES: Final[tuple[Resource, ...]] = ("memory", "cpus", "storage")
# A fork bomb must not take the host whatever the policy: the pids ceiling stays on, even in
# `uncapped`. 4096 is the pids limit GKE and EKS give a pod by default.
DEFAULT_PIDS_MAX = 4096

_MULTIPLE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x\s*$", re.IGNORECASE)
_CPUS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:cpus?)?\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Bound:
    """Either `multiple` of the spec, or an `absolute` amount (bytes, or CPUs)."""

    multiple: float | None = None
    absolute: float | None = None

    def resolve(self, spec_amount: float) -> float:
        return (
            spec_amount * self.multiple if self.multiple is not None else float(self.absolute or 0)
        )

    def __str__(self) -> str:
        if self.multiple is not None:
            return f"{self.multiple:g}x"
        return f"{self.absolute:g}"


def parse_bound(text: str, resource: Resource) -> Bound | None:
    """'3x' → 3 times the spec; '4g' → 4 GiB; '2cpu' → 2 CPUs; 'none' → None (uncapped)."""
    cleaned = str(text).strip().lower()
    if cleaned in ("none", "uncapped", "inf", ""):
        return None
    if match := _MULTIPLE.match(cleaned):
        return _positive(Bound(multiple=float(match.group(1))), text)
    try:
        if resource == "cpus":
            match = _CPUS.match(cleaned)
            if not match:
                raise ValueError
            return _positive(Bound(absolute=float(match.group(1))), text)
        return _positive(Bound(absolute=float(parse_bytes(cleaned))), text)
    except ValueError:
        example = "2cpu" if resource == "cpus" else "4g"
        raise PolicyError(
            f"{resource}: cannot read {text!r}; use a multiple of the spec (1x, 2.5x), "
            f"an absolute amount ({example}) or none"
        ) from None


def _positive(bound: Bound, text: str) -> Bound:
    if (bound.multiple or bound.absolute or 0) <= 0:
        raise PolicyError(f"{text!r}: a bound must be positive")
    return bound


class ResourceBounds(BaseModel):
    """Floor and ceiling of one resource, as the user wrote them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    floor: str = Field(
        "1x", description="Guaranteed: a multiple of the spec (1x) or absolute (4g)."
    )
    ceiling: str | None = Field("1x", description="Kill/throttle point; None = uncapped.")


class Policy(BaseModel):
    """How each task's spec becomes enforcement. Unknown keys are refused (`celing = 3x` fails)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    memory: ResourceBounds = ResourceBounds()
    cpus: ResourceBounds = ResourceBounds()
    storage: ResourceBounds = ResourceBounds()
    pids_max: int | None = Field(DEFAULT_PIDS_MAX, gt=0, description="Process count ceiling.")

    @field_validator("memory", "cpus", "storage")
    @classmethod
    def _bounds_parse(cls, value: ResourceBounds, info: object) -> ResourceBounds:
        resource = info.field_name  # type: ignore[attr-defined]
        parse_bound(value.floor, resource)
        if value.ceiling is not None:
            parse_bound(value.ceiling, resource)
        return value

    @model_validator(mode="after")
    def _floor_fits_under_ceiling(self) -> Self:
        for resource in RESOURCES:
            floor, ceiling = self.bounds(resource)
            if floor is None:
                raise PolicyError(f"policy {self.name}: {resource} floor cannot be none")
            same_kind = ceiling is not None and (floor.multiple is None) == (
                ceiling.multiple is None
            )
            if same_kind and floor.resolve(1.0) > ceiling.resolve(1.0):  # type: ignore[union-attr]
                raise PolicyError(
                    f"policy {self.name}: {resource} floor {floor} is above its ceiling {ceiling}"
                )
        return self

    def bounds(self, resource: Resource) -> tuple[Bound | None, Bound | None]:
        rb: ResourceBounds = getattr(self, resource)
        ceiling = parse_bound(rb.ceiling, resource) if rb.ceiling is not None else None
        return parse_bound(rb.floor, resource), ceiling

    def describe(self) -> dict[str, dict[str, str | None]]:
        """Floor and ceiling per resource, as reports and the disclosure card show them."""
        out: dict[str, dict[str, str | None]] = {}
        for resource in RESOURCES:
            floor, ceiling = self.bounds(resource)
            out[resource] = {"floor": str(floor), "ceiling": str(ceiling) if ceiling else None}
        out["pids"] = {"floor": None, "ceiling": str(self.pids_max) if self.pids_max else None}
        return out

    def memory_ceiling_multiple(self, spec: Spec) -> float:
        """The memory ceiling as a multiple of this spec; inf when uncapped (the sweep's x-axis)."""
        _, ceiling = self.bounds("memory")
        return ceiling.resolve(spec.memory_bytes) / spec.memory_bytes if ceiling else float("inf")


def _uniform(name: str, floor: str, ceiling: str | None) -> Policy:
    rb = ResourceBounds(floor=floor, ceiling=ceiling)
    return Policy(name=name, memory=rb, cpus=rb, storage=rb)


DEFAULT_POLICY: Final = "strict"  # no words at all: the spec is the ceiling
PRESETS: Final = MappingProxyType(
    {
        "strict": _uniform("strict", "1x", "1x"),  # a Kubernetes pod with request = limit
        "headroom": _uniform("headroom", "1x", "3x"),
        "uncapped": _uniform("uncapped", "1x", None),
    }
)


def resolve_policy(text: str) -> Policy:
    """A preset name, a bare multiplier ('2.5x' = floor 1x, ceiling 2.5x) or 'FLOOR/CEILING'."""
    cleaned = text.strip().lower()
    if cleaned in PRESETS:
        return PRESETS[cleaned]
    if "/" in cleaned:
        floor, ceiling = cleaned.split("/", 1)
        return policy_from_bounds(floor, ceiling)
    if _MULTIPLE.match(cleaned) or cleaned in ("none", "uncapped"):
        return policy_from_bounds("1x", cleaned)
    names = ", ".join(PRESETS)
    raise PolicyError(f"unknown policy {text!r}: use {names}, a multiplier (3x) or FLOOR/CEILING")


def policy_from_words(
    policy: str | None = None, floor: str | None = None, ceiling: str | None = None
) -> Policy:
    """What `policy`, `floor` and `ceiling` mean, read here once for every place that takes them
    (`run`, `sweep`, `campaign`, a run configuration, Harbor's `--ek`, Inspect's sandbox config),
    so the same words are the same policy everywhere. A floor alone has no ceiling (`floor=2x` is
    floor 2x, uncapped), a ceiling alone has floor 1x, nothing at all is `strict` (the spec is the
    ceiling, as a harness's own limit means), and a policy beside a floor or ceiling is refused
    rather than one of them silently winning."""
    if floor is None and ceiling is None:
        return resolve_policy(DEFAULT_POLICY if policy is None else policy)
    if policy is not None:
        raise PolicyError(
            f"give either policy={policy} or floor=.../ceiling=..., not both: they say one policy"
        )
    return policy_from_bounds("1x" if floor is None else floor, ceiling)


def policy_from_bounds(floor: str, ceiling: str | None) -> Policy:
    """`--floor 1x --ceiling 3x`: a multiple applies to every resource; absolute amounts name
    theirs (`memory=4g,cpus=2`), the resources left out staying at 1x. A preset's name if equal."""
    floors, ceilings = _per_resource(floor), _per_resource(ceiling or "none")
    bounds = {
        r: ResourceBounds(floor=floors.get(r) or "1x", ceiling=ceilings.get(r, "1x"))
        for r in RESOURCES
    }
    name = f"{floor.strip()}/{(ceiling or 'none').strip()}"
    candidate = Policy(name=name, **bounds)
    for preset in PRESETS.values():
        if preset.describe() == candidate.describe():
            return preset
    return candidate


def _per_resource(text: str) -> dict[Resource, str | None]:
    cleaned = text.strip().lower()
    if "=" not in cleaned:
        if cleaned in ("none", "uncapped") or _MULTIPLE.match(cleaned):
            value = None if cleaned in ("none", "uncapped") else cleaned
            return dict.fromkeys(RESOURCES, value)
        raise PolicyError(f"{text!r} is an absolute amount: name its resource, e.g. memory={text}")
    out: dict[Resource, str | None] = {}
    for part in cleaned.split(","):
        resource, _, value = part.partition("=")
        if resource.strip() not in RESOURCES:
            raise PolicyError(f"{part!r}: resources are {', '.join(RESOURCES)}")
        out[resource.strip()] = None if value.strip() in ("none", "uncapped") else value.strip()  # type: ignore[index]
    return out


@dataclass(frozen=True, slots=True)
class Limits:
    """A policy applied to one task's spec: what the sandbox must enforce, in kernel units."""

    policy: str
    memory_floor_bytes: int
    memory_ceiling_bytes: int | None
    cpu_floor: float
    cpu_ceiling: float | None
    storage_ceiling_bytes: int | None
    pids_max: int | None
    memory_spec_bytes: int
    memory_ceiling_multiple: float
    memory_floor_multiple: float


def apply_policy(policy: Policy, spec: Spec) -> Limits:
    memory_floor, memory_ceiling = _resolved(policy, "memory", spec.memory_bytes)
    cpu_floor, cpu_ceiling = _resolved(policy, "cpus", spec.cpus)
    _, storage_ceiling = _resolved(policy, "storage", spec.storage_bytes)
    return Limits(
        policy=policy.name,
        memory_floor_bytes=int(memory_floor),
        memory_ceiling_bytes=int(memory_ceiling) if memory_ceiling is not None else None,
        cpu_floor=cpu_floor,
        cpu_ceiling=cpu_ceiling,
        storage_ceiling_bytes=int(storage_ceiling) if storage_ceiling is not None else None,
        pids_max=policy.pids_max,
        memory_spec_bytes=spec.memory_bytes,
        memory_ceiling_multiple=policy.memory_ceiling_multiple(spec),
        memory_floor_multiple=memory_floor / spec.memory_bytes,
    )


def _resolved(policy: Policy, resource: Resource, spec_amount: float) -> tuple[float, float | None]:
    floor, ceiling = policy.bounds(resource)
    assert floor is not None  # refused by the validator
    low = floor.resolve(spec_amount)
    high = ceiling.resolve(spec_amount) if ceiling is not None else None
    if high is not None and low > high:
        raise PolicyError(
            f"policy {policy.name}: {resource} floor {floor} ({low:g}) is above its ceiling "
            f"{ceiling} ({high:g}) for a spec of {spec_amount:g}"
        )
    return low, high
