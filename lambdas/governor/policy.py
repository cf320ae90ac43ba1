"""The one typed definition of ``governor.yaml``: the core sections and every capability's own, composed.

Imported by ``infra/`` at ``cdk synth`` and by every Lambda at start-up, so a policy that synthesizes is a policy
the runtime accepts. Every section is report-only (``enforce: false``) unless the file says otherwise.

This module sits above the registry: :class:`Policy` is the core sections (``governor.core_policy``, which knows no
capability) plus, in the registry's order, the section each capability declares (``section_model``), and it runs
every capability's checks over the whole file. Nothing the registry loads imports it: a capability's declaration,
its typed actions and the shared domain take a ``CorePolicy``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from governor.core_policy import (
    CORE_CHECKS,
    AuditPolicy,
    BudgetsPolicy,
    ExemptingTags,
    FleetPolicy,
    LedgerPolicy,
    PricingPolicy,
)
from governor.core_policy import EARLIEST_DATE as EARLIEST_DATE
from governor.core_policy import LATEST_DATE as LATEST_DATE
from governor.core_policy import CorePolicy as CorePolicy
from governor.core_policy import Exemptions as Exemptions
from governor.core_policy import NotificationsPolicy as NotificationsPolicy
from governor.core_policy import PriceEntry as PriceEntry
from governor.policy_types import MAX_DAYS as MAX_DAYS
from governor.policy_types import PortRange as PortRange
from governor.policy_types import Schedule as Schedule
from governor.policy_types import Section as _Model
from governor.policy_types import TagKey as TagKey
from governor.registry import REGISTRY

if TYPE_CHECKING:
    from governor.idle.policy import IdlePolicy
    from governor.interactions.policy import InteractionsPolicy
    from governor.keys.policy import KeysPolicy
    from governor.lifecycle.policy import LifecyclePolicy
    from governor.network.policy import NetworkPolicy
    from governor.report.policy import ReportsPolicy
    from governor.securityhub.policy import SecurityHubPolicy
    from governor.spot.policy import SpotPolicy


class PolicyError(Exception):
    """A policy file that cannot be used; the message names the file, the field path and the reason."""


class PolicyWarning(UserWarning):
    """A policy that is valid today but says something a later release refuses (a deprecated key's old place).

    Raised with :func:`warnings.warn` while the policy is validated; ``governor validate`` prints each one and
    ``cdk synth`` shows each as a warning on the stack (:func:`policy_warnings` collects them)."""


@contextmanager
def policy_warnings() -> Iterator[list[str]]:
    """The :class:`PolicyWarning` messages raised inside the ``with`` block, each once, in order (filled when the
    block ends); other warnings go on as usual."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PolicyWarning)
        yield found
    for warning in caught:
        if issubclass(warning.category, PolicyWarning):
            if str(warning.message) not in found:
                found.append(str(warning.message))
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


class Policy(_Model):
    """The whole of ``governor.yaml``."""

    version: Literal[1] = 1
    fleet: FleetPolicy = Field(default_factory=FleetPolicy)
    pricing: PricingPolicy = Field(default_factory=PricingPolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    ledger: LedgerPolicy = Field(default_factory=LedgerPolicy)
    budgets: BudgetsPolicy = Field(default_factory=BudgetsPolicy)
    if TYPE_CHECKING:  # each capability's section (its ``section_model``), composed below in the registry's order
        lifecycle: LifecyclePolicy = Field(default_factory=LifecyclePolicy)
        keys: KeysPolicy = Field(default_factory=KeysPolicy)
        spot: SpotPolicy = Field(default_factory=SpotPolicy)
        idle: IdlePolicy = Field(default_factory=IdlePolicy)
        interactions: InteractionsPolicy = Field(default_factory=InteractionsPolicy)
        network: NetworkPolicy = Field(default_factory=NetworkPolicy)
        notifications: NotificationsPolicy = Field(default_factory=NotificationsPolicy)
        reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
        securityhub: SecurityHubPolicy = Field(default_factory=SecurityHubPolicy)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """A key at its old place (:func:`moved_keys`) is read at its new one, with a :class:`PolicyWarning` per key.

        Set at both places, it stays at the old one, where the section refuses it with its field path
        (``_format_error`` says why)."""
        if not isinstance(data, dict):
            return data
        moved = dict(data)
        for (old, key), new in moved_keys().items():
            section, target = moved.get(old), moved.get(new)
            target = {} if target is None else target
            if not (isinstance(section, dict) and key in section and isinstance(target, dict)):
                continue
            if key in target:
                continue  # both set: the old section refuses it
            moved[old] = {k: v for k, v in section.items() if k != key}
            moved[new] = {**target, key: section[key]}
            warnings.warn(f"{old}.{key} is deprecated: move it to {new}.{key}", PolicyWarning, stacklevel=2)
        return moved

    def exempting_tags(self) -> tuple[ExemptingTags, ...]:
        """Every capability's exempting tags under this policy (``idle.exemptions.tags``), in registry order."""
        return tuple(declared(self) for c in REGISTRY.values() if (declared := c.exempting_tags) is not None)

    @model_validator(mode="after")
    def _checked(self) -> Policy:
        """Every capability's checks over the whole file (its section with the core ones), in registry order, then
        the core sections' own (``governor.core_policy.CORE_CHECKS``)."""
        for check in (*REGISTRY.checks(), *CORE_CHECKS):
            check(self)
        return self


def _composed(core: type[Policy]) -> type[Policy]:
    """``Policy`` with every section a capability declares (its registry entry's ``section_model``) after the core
    sections above, in the registry's order, each defaulting to its model's defaults."""
    from pydantic import create_model

    sections: dict[str, Any] = {
        capability.section: (model, Field(default_factory=model))
        for capability in REGISTRY.values()
        if (model := capability.section_model) is not None
    }
    clash = sorted(set(sections) & set(core.model_fields))
    if clash:
        raise TypeError(f"policy sections declared twice (the core and a capability): {clash}")
    composed: type[Policy] = create_model(
        "Policy", __base__=core, __module__=__name__, __doc__=core.__doc__, **sections
    )
    return composed


if not TYPE_CHECKING:  # type checkers see the sections above; the composition is the registry's
    Policy = _composed(Policy)


@cache
def moved_keys() -> dict[tuple[str, str], str]:
    """(section, key) -> the section ``key`` moved to, from every section's ``moved_keys`` (kept for one release)."""
    return {
        (name, key): new
        for name, field in Policy.model_fields.items()
        if isinstance(section := field.annotation, type) and issubclass(section, _Model)
        for key, new in section.moved_keys.items()
    }


def _fields_at(location: tuple[Any, ...]) -> list[str]:
    """The field names of the section that holds ``location`` (for "did you mean"), or none when it is not a model."""
    model: Any = Policy
    for part in location[:-1]:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def policy_field(path: str) -> str:
    """``path`` (``"keys.secret_max_rotation_days"``) when it names a field of :class:`Policy`, else ValueError.

    Text that tells a person which setting to change says it through this, so a renamed or misspelt field fails the
    tests that render it instead of sending people to a setting that does not exist.
    """
    model: Any = Policy
    for part in path.split("."):
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            raise ValueError(f"governor.yaml has no field {path!r} ({part!r} is not one)")
        model = fields[part].annotation
    return path


def _one_line(text: str) -> str:
    """``text`` with every line break or other unprintable character written as its escape (``\\n``).

    A policy key or value is the author's text and reaches the message (``fleet.a\\nb: unknown field``); the message
    is one line everywhere it is shown (``governor validate``, the synth's error), so a key holding a line break must
    not split it (found by ``tests/reliability/test_fuzz.py``).
    """
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _format_error(source: str, error: ValidationError) -> str:
    import difflib

    problems = []
    for item in error.errors(include_input=False):
        path = ".".join(_one_line(str(part)) for part in item["loc"]) or "(top level)"
        reason = _one_line(item["msg"].removeprefix("Value error, "))
        moved_to = moved_keys().get((str(item["loc"][0]), str(item["loc"][-1]))) if len(item["loc"]) == 2 else None
        if item["type"] == "extra_forbidden" and moved_to is not None:
            reason = f"moved to {moved_to}.{item['loc'][-1]}, which is set too: delete this one"
        elif item["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(item["loc"][-1]), _fields_at(item["loc"]), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "check the spelling against governor.yaml"
            reason = f"unknown field ({hint})"
        problems.append(f"{path}: {reason}")
    return f"{source}: " + "; ".join(problems)


def parse_policy(data: Any, source: str = "governor.yaml") -> Policy:
    """Validate already-parsed YAML; raises :class:`PolicyError` with the field path on any problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the top level must be a mapping of sections, not {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(_format_error(source, error)) from None
    except RecursionError:
        raise PolicyError(f"{source}: nested too deeply to be a policy") from None
    except UnicodeError:  # a validator's message quoting a lone UTF-16 surrogate, which pydantic cannot encode
        raise PolicyError(f"{source}: holds text that is not valid Unicode (a lone surrogate, \\ud800)") from None


def environment_policy(policy: Policy, sections: Iterable[str]) -> str:
    """A function's ``GOVERNOR_POLICY``: ``fleet``, ``ledger`` and the sections it reads (its registry entry's
    ``environment_sections``), each holding only what differs from the model's defaults; the function's
    :func:`parse_policy` fills in the rest. The stack writes it (``infra/constructs/function.py``) and so does the
    demo, so a section a function reads but its entry does not list is missed in both, never only when deployed."""
    data = policy.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return json.dumps({name: data.get(name, {}) for name in ("fleet", "ledger", *sections)}, separators=(",", ":"))


def _strict_loader() -> Any:
    """PyYAML's safe loader, stricter in two ways that matter for a policy.

    A key written twice in one mapping is an error naming both lines (YAML 1.2 forbids it; PyYAML silently keeps the
    last, so ``enforce: false`` then ``enforce: true`` would enforce), and an impossible date (``2026-02-30``) is a
    YAML error with its line instead of a ``ValueError`` from deep inside the constructor.
    """
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *anchor` keys may be overridden on purpose
                    try:
                        key = self.construct_object(key_node, deep=True)
                        hash(key)
                    except TypeError:
                        continue  # the base constructor reports unhashable keys with their position
                    line = key_node.start_mark.line + 1
                    if key in first:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"duplicate key {key!r} (first at line {first[key]})",
                            key_node.start_mark,
                        )
                    first[key] = line
            return super().construct_mapping(node, deep=deep)

        def construct_scalar(self, node: Any) -> Any:
            value = super().construct_scalar(node)
            if isinstance(value, str) and any("\ud800" <= char <= "\udfff" for char in value):
                # "\ud800\udc00" in a double-quoted string: YAML, unlike JSON, pairs no surrogates, and the validator
                # would fail on the lone ones with a UnicodeEncodeError (found by tests/reliability/test_fuzz.py)
                raise yaml.constructor.ConstructorError(
                    None, None, "a \\u escape names a lone UTF-16 surrogate, which is no character", node.start_mark
                )
            return value

        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except ValueError as error:  # Python refuses int() of more than 4,300 digits (sys.int_info)
                raise yaml.constructor.ConstructorError(
                    None, None, f"number too long ({len(str(node.value))} characters)", node.start_mark
                ) from error

        def construct_yaml_timestamp(self, node: Any) -> Any:
            try:
                return super().construct_yaml_timestamp(node)
            except (ValueError, OverflowError) as error:
                raise yaml.constructor.ConstructorError(
                    None, None, f"invalid date {node.value!r} ({error})", node.start_mark
                ) from None

    StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp)
    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader


def parse_policy_text(text: str, source: str = "governor.yaml") -> Policy:
    import yaml  # deploy-time and CLI only; Lambdas receive the policy as JSON

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise PolicyError(f"{source}: {where}{_one_line(str(problem))}") from None
    except RecursionError:
        raise PolicyError(f"{source}: nested too deeply to be a policy") from None
    return parse_policy(data, source)


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; every failure is a :class:`PolicyError` naming the file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError(f"{file}: cannot read the policy file ({error.__class__.__name__}: {error})") from None
    return parse_policy_text(text, str(file))


DEFAULT_POLICY_FILE = "governor.yaml"
SHIPPED_DEFAULT = "the shipped default policy (report-only; documented in governor.yaml)"


def resolve_policy(path: str | Path | None) -> tuple[Policy, str]:
    """The policy a command runs with, and where it came from: the file given; else ``./governor.yaml``; else the
    shipped default, so ``governor report`` and ``backtest`` work from any directory.

    The shipped default is the model's own defaults, which the repository's ``governor.yaml`` documents field by
    field (a test keeps the two equal); it needs no data file, so any install finds it.
    """
    if path is not None:
        return load_policy(path), str(path)
    if Path(DEFAULT_POLICY_FILE).is_file():
        return load_policy(DEFAULT_POLICY_FILE), DEFAULT_POLICY_FILE
    return Policy(), SHIPPED_DEFAULT
