"""JSON schemas for the structured-output tests and benchmark: nested objects, arrays, enums,
integer ranges, optional fields, references, formats and patterns. Strings and arrays are
bounded, so that even a rambling sampled reply ends within the tests' token limits.
``FRACTION_BOUNDS`` bounds numbers with fractions, which llama.cpp's grammars cannot."""

from __future__ import annotations

NAME = {"type": "string", "maxLength": 24}

SCHEMAS = {
    "person": {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]},
    "address": {
        "type": "object",
        "properties": {"street": NAME, "city": NAME, "location": {
            "type": "object", "properties": {"lat": {"type": "integer", "minimum": -90, "maximum": 90}, "lon": {"type": "integer", "minimum": -180, "maximum": 180}},
            "required": ["lat", "lon"]}},
        "required": ["city", "location"],
    },
    "tags": {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 3}}, "required": ["tags"]},
    "colour": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "optional fields": {"type": "object", "properties": {"title": NAME, "subtitle": NAME, "pages": {"type": "integer", "minimum": 1, "maximum": 999}}, "required": ["title"]},
    "all optional": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "integer", "minimum": 0, "maximum": 9}}},
    "temperature": {"type": "object", "properties": {"celsius": {"type": "integer", "minimum": -40, "maximum": 50}}, "required": ["celsius"]},
    "exclusive range": {"type": "object", "properties": {"score": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}, "required": ["score"]},
    "flag and constant": {"type": "object", "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}}, "required": ["version", "ok"]},
    "list of objects": {
        "type": "object",
        "properties": {"items": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"name": NAME, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["name", "qty"]}}},
        "required": ["items"],
    },
    "string or number": {"type": "object", "properties": {"value": {"anyOf": [NAME, {"type": "integer", "minimum": 0, "maximum": 1000}]}}, "required": ["value"]},
    "nullable": {"type": "object", "properties": {"nickname": {"type": ["string", "null"], "maxLength": 24}}, "required": ["nickname"]},
    "references": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 100}, "y": {"type": "integer", "minimum": 0, "maximum": 100}}, "required": ["x", "y"]}},
        "type": "object", "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}}, "required": ["start", "end"],
    },
    "date": {"type": "object", "properties": {"event": NAME, "day": {"type": "string", "format": "date"}}, "required": ["event", "day"]},
    "pattern": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["zip"]},
    "tuple": {"type": "object", "properties": {"pair": {"type": "array", "prefixItems": [NAME, {"type": "integer", "minimum": 0, "maximum": 99}]}}, "required": ["pair"]},
    "matrix": {"type": "object", "properties": {"rows": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}, "required": ["rows"]},
    "enum of numbers": {"type": "object", "properties": {"stars": {"enum": [1, 2, 3, 4, 5]}}, "required": ["stars"]},
    "deep nesting": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "c": {"type": "object", "properties": {"d": NAME}, "required": ["d"]}}, "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]},
    "either shape": {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"radius": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["radius"], "additionalProperties": False},
        {"type": "object", "properties": {"side": NAME}, "required": ["side"], "additionalProperties": False}]}}, "required": ["shape"]},
    "no extra properties": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 10000}, "label": NAME},
                            "required": ["id", "label"], "additionalProperties": False},
    "list of enums": {"type": "object", "properties": {"days": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"enum": ["mon", "tue", "wed"]}}}, "required": ["days"]},
}

FRACTION_BOUNDS = {
    "probability": {"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["p"]},
    "price": {"type": "object", "properties": {"item": NAME, "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}}, "required": ["item", "price"]},
}


def question(name: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Give an example {name} as a JSON object."}]
