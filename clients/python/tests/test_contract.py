"""The client's copy of the API against openapi/openapi.json: every field
it names (the TypedDicts of `lockgate._api`) exists in the schema of the
same name with a type the client can read, every enumeration value it
names is one of the document's, and every problem slug it tells apart is
one the document lists, with the status the client expects."""

from __future__ import annotations

import copy
import json
import re
import typing
from typing import Any, Dict, List, Set, Tuple, Union

import pytest

from lockgate import _api
from lockgate.errors import SLUG_ERRORS
from servers import REPO

Schema = Dict[str, Any]
NONE = type(None)
JSON_TYPES = {int: "integer", str: "string", bool: "boolean", float: "number"}


def load_document() -> Schema:
    with open(REPO / "openapi" / "openapi.json", encoding="utf-8") as file:
        return json.load(file)


def client_documents() -> List[type]:
    """The TypedDicts the client declares, one per schema it reads or writes."""
    return [
        value
        for name, value in vars(_api).items()
        if isinstance(value, type) and hasattr(value, "__required_keys__") and not name.startswith("_")
    ]


def contract_problems(document: Schema) -> List[str]:
    """What in the client's copy the document does not back, as sentences."""
    problems: List[str] = []
    schemas = document["components"]["schemas"]
    for declared in client_documents():
        name = declared.__name__
        schema = schemas.get(name)
        if schema is None:
            problems.append(f"{name}: no such schema")
            continue
        properties = schema.get("properties", {})
        for field, annotation in typing.get_type_hints(declared).items():
            where = f"{name}.{field}"
            if field not in properties:
                problems.append(f"{where}: no such field")
                continue
            problems += type_problems(annotation, properties[field], schemas, where)
        for field in sorted(declared.__required_keys__ - set(schema.get("required", ()))):  # type: ignore[attr-defined]
            problems.append(f"{name}.{field}: the client needs it, the document makes it optional")
    problems += slug_problems(document)
    return problems


def type_problems(annotation: Any, prop: Schema, schemas: Dict[str, Schema], where: str) -> List[str]:
    """Whether every value the document allows in `prop` is one of
    `annotation`'s (a field may be narrower in the document, never wider)."""
    options = list(alternatives(prop, schemas))
    base, nullable = unwrap_optional(annotation)
    problems: List[str] = []
    if not nullable and any(option.get("type") == "null" for _, option in options):
        problems.append(f"{where}: may be null in the document, not in the client")
    for ref, option in options:
        if option.get("type") != "null" and not matches(base, ref, option, schemas):
            shown = ref or json.dumps({k: v for k, v in option.items() if k != "description"})
            problems.append(f"{where}: the client reads {annotation!r}, the document has {shown}")
    return problems


def alternatives(prop: Schema, schemas: Dict[str, Schema], ref: str = "") -> List[Tuple[str, Schema]]:
    """The schemas a value may match, each with the name it was referred by."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return alternatives(schemas[name], schemas, name)
    for combinator in ("oneOf", "anyOf"):
        if combinator in prop:
            return [option for part in prop[combinator] for option in alternatives(part, schemas, ref)]
    kinds = prop.get("type")
    if isinstance(kinds, list):
        return [(ref, dict(prop, type=kind)) for kind in kinds]
    return [(ref, prop)]


def unwrap_optional(annotation: Any) -> Tuple[Any, bool]:
    if typing.get_origin(annotation) is Union:
        args = [arg for arg in typing.get_args(annotation) if arg is not NONE]
        nullable = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else Union[tuple(args)]), nullable
    return annotation, False


def matches(base: Any, ref: str, option: Schema, schemas: Dict[str, Schema]) -> bool:
    kind = option.get("type")
    if typing.get_origin(base) is typing.Literal:
        return kind == "string" and set(typing.get_args(base)) <= set(option.get("enum", ()))
    if typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        return kind == "array" and not type_problems(item, option.get("items", {}), schemas, "")
    if isinstance(base, type) and hasattr(base, "__required_keys__"):
        return ref == base.__name__  # a document of its own, checked on its own
    if base is float:
        return kind in ("number", "integer")
    return JSON_TYPES.get(base) == kind


def documented_slugs(document: Schema) -> Dict[str, Set[int]]:
    """Each problem slug the document's answers name ("`slug`: what it
    means"), with the statuses it is answered with."""
    slugs: Dict[str, Set[int]] = {}
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                for slug in re.findall(r"(?:^|\n\n)`([a-z-]+)`:", response.get("description", "")):
                    slugs.setdefault(slug, set()).add(int(status))
    return slugs


def slug_problems(document: Schema) -> List[str]:
    slugs = documented_slugs(document)
    problems = []
    for slug, (status, _error) in SLUG_ERRORS.items():
        if slug not in slugs:
            problems.append(f"problem {slug}: not in the document")
        elif status not in slugs[slug]:
            problems.append(f"problem {slug}: answered with {sorted(slugs[slug])} in the document, not {status}")
    return problems


def test_the_clients_types_are_the_documents() -> None:
    document = load_document()
    assert contract_problems(document) == []
    # Not vacuous: the client names these, and the document has them.
    names = {declared.__name__ for declared in client_documents()}
    assert {"LockGrant", "LockStatus", "LeaseEntry", "LockStreamEvent", "LockWatchEvent", "Problem"} <= names
    assert {"SessionBody", "SessionGrant", "SessionRenewedEvent", "SessionEndedEvent", "FreeLock"} <= names
    assert len(documented_slugs(document)) >= len(SLUG_ERRORS)


def _mutated(change: str) -> Schema:
    document = copy.deepcopy(load_document())
    schemas = document["components"]["schemas"]
    if change == "field renamed":
        grant = schemas["LockGrant"]
        grant["properties"]["fence"] = grant["properties"].pop("fencing_token")
        grant["required"] = ["fence" if field == "fencing_token" else field for field in grant["required"]]
    elif change == "type changed":
        schemas["RenewedEvent"]["properties"]["expires_at_ms"] = {"type": "string"}
    elif change == "made nullable":
        schemas["LeaseEntry"]["properties"]["holds"]["type"] = ["integer", "null"]
    elif change == "made optional":
        schemas["LockGrant"]["required"].remove("token")
    elif change == "enum value dropped":
        schemas["LockStreamEventName"]["enum"].remove("renewed")
    elif change == "mode enum dropped":
        schemas["LockModeText"]["enum"].remove("shared")
    elif change == "session field renamed":
        grant = schemas["SessionGrant"]
        grant["properties"]["session_id"] = grant["properties"].pop("id")
        grant["required"] = ["session_id" if field == "id" else field for field in grant["required"]]
    elif change == "lost key dropped":
        del schemas["LostEvent"]["properties"]["key"]
    elif change == "slug renamed":
        for operations in document["paths"].values():
            for operation in operations.values():
                for response in operation.get("responses", {}).values():
                    text = response.get("description", "")
                    response["description"] = text.replace("`lock-held`:", "`lock-busy`:")
    return document


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ("field renamed", "LockGrant.fencing_token: no such field"),
        ("type changed", "RenewedEvent.expires_at_ms: the client reads"),
        ("made nullable", "LeaseEntry.holds: may be null"),
        ("made optional", "LockGrant.token: the client needs it"),
        ("enum value dropped", "LockStreamEvent.event: the client reads"),
        ("mode enum dropped", "LockStatus.mode: the client reads"),
        ("session field renamed", "SessionGrant.id: no such field"),
        ("lost key dropped", "LostEvent.key: no such field"),
        ("slug renamed", "problem lock-held: not in the document"),
    ],
)
def test_a_change_of_the_contract_fails(change: str, complaint: str) -> None:
    problems = contract_problems(_mutated(change))
    assert any(problem.startswith(complaint) for problem in problems), problems
