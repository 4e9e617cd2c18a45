"""The shape a reply must take: free text (no ReplyFormat), any JSON object, or JSON a schema describes.

Every door builds it once, in ChatRequest.build: from OpenAI's ``response_format``, or from a
forced ``tool_choice`` (a call of the offered functions, as JSON the reply parser reads as tool
calls). The schema is checked here, before any backend sees it: valid JSON Schema, only the
keywords every backend enforces, and sizes that keep its grammar small. Each backend then
compiles it with its own library (BaseEngine.reply_constraint), before the request takes a place
in the model's line, and decodes under it: a reply cannot leave the schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from .errors import ConfigError
from .settings import Settings, page_control

# The keywords a reply schema may use: those that llama.cpp's grammar converter and xgrammar both
# enforce, and annotations, which constrain nothing. A keyword outside them is refused rather than
# silently ignored, so a schema never promises more than the reply keeps.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"})
KEYWORDS = ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}
# String formats both grammars write out; others would be plain strings.
FORMATS = frozenset({"date", "time", "date-time", "uuid"})
# Sizes beyond which a grammar grows out of hand (llama.cpp's converter writes out repetitions and
# the orders of optional properties), checked before any converter runs.
MAX_SCHEMA_CHARS = 32_000
MAX_DEPTH = 16
MAX_REPEAT = 1_000
MAX_PROPERTIES = 64
_REPEATS = ("minItems", "maxItems", "minLength", "maxLength")
# Grammar converters write a pattern's repetitions out in full, nested ones multiplied: a{300000000}
# is 107 bytes of schema and gigabytes of grammar. Bounded like the lengths above, with room for
# patterns such as ^[a-z]{1,1000}$ and (\d{3}-){100}; the bound holds for a schema's patterns
# together too, as xgrammar's time grows with each (a hundred bounded ones kept it busy for minutes).
MAX_PATTERN_SIZE = 5_000
# {m}, {m,}, {m,n}, and {,n}, which Python's engine reads as {0,n}.
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}|\{,(\d+)\}")


@dataclass(frozen=True)
class ReplyFormat:
    """``kind``: "json_object" (any JSON object) or "json_schema". ``schema_text``: the schema as
    compact JSON (a hashable key for the compiled grammars); any object's is {"type": "object"}. ``name``: what the schema is called,
    in messages. ``strict`` is OpenAI's flag; replies always keep to the schema here, strict or not."""

    kind: Literal["json_object", "json_schema"]
    schema_text: str
    name: str = "reply"
    strict: bool = False
    where: str = "response_format.json_schema.schema"

    @property
    def schema(self) -> dict[str, Any]:
        return json.loads(self.schema_text)

    @property
    def label(self) -> str:
        """How a message that refuses this format names it: "The person schema"."""
        return f"The {self.name} schema"

    @classmethod
    def json_object(cls) -> ReplyFormat:
        return cls("json_object", '{"type":"object"}', "JSON object", where="response_format")

    @classmethod
    def json_schema(cls, schema: Any, name: str = "reply", strict: bool = False, where: str = "schema") -> ReplyFormat:
        """A format for ``schema``, checked; ``where`` names it in errors."""
        check_schema(schema, where)
        return cls("json_schema", json.dumps(schema, ensure_ascii=False, separators=(",", ":")), name, strict, where)

    @classmethod
    def from_openai(cls, response_format: Any) -> ReplyFormat | None:
        """OpenAI's ``response_format``: {"type": "text"}, {"type": "json_object"} or {"type":
        "json_schema", "json_schema": {"name", "schema", "strict", "description"}}; None is text."""
        if response_format is None or isinstance(response_format, ReplyFormat):
            return response_format
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "text":
            return None
        if kind == "json_object":
            extra = sorted(set(response_format) - {"type"})
            if extra:
                raise ConfigError(f"response_format of type json_object takes no other field, got {', '.join(extra)}.")
            return cls.json_object()
        if kind != "json_schema":
            raise ConfigError(
                f"response_format must be {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}} or {{\"type\": \"json_schema\", "
                f"\"json_schema\": {{\"name\": ..., \"schema\": {{...}}}}}}; got {json.dumps(response_format)[:200]}."
            )
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or "schema" not in spec:
            raise ConfigError("response_format.json_schema must be an object with a \"name\" and a \"schema\" (the JSON Schema the reply follows).")
        extra = sorted(set(spec) - {"name", "schema", "strict", "description"})
        if extra:
            raise ConfigError(f"response_format.json_schema has unknown field(s) {', '.join(extra)}; it takes name, schema, strict and description.")
        return cls.json_schema(spec["schema"], spec["name"], bool(spec.get("strict")), "response_format.json_schema.schema")

    @classmethod
    def for_tool_call(cls, tools: list[dict[str, Any]], choice: Any, parallel: bool | None = None) -> ReplyFormat | None:
        """The format that forces a tool call, for OpenAI's ``tool_choice``: "required" (a call of
        any of ``tools``; a list of them unless ``parallel`` is False), or {"type": "function",
        "function": {"name": ...}} (one call of that function). "auto", "none" and None force nothing."""
        if choice in (None, "auto", "none"):
            return None
        functions = {tool.get("function", tool)["name"]: tool.get("function", tool) for tool in tools or []}
        if choice == "required":
            if not functions:
                raise ConfigError("tool_choice \"required\" needs tools to choose from; give tools, or leave tool_choice out.")
            calls = [_call_schema(name, function, f"tools[{index}].function.parameters")
                     for index, (name, function) in enumerate(functions.items())]
            call = calls[0] if len(calls) == 1 else {"anyOf": calls}
            schema = call if parallel is False else {"type": "array", "items": call, "minItems": 1}
            return cls("json_schema", json.dumps(schema, separators=(",", ":")), "tool_call", True, "tools")
        name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if not isinstance(name, str):
            raise ConfigError(f"tool_choice must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}; got {choice!r}.")
        if name not in functions:
            offered = ", ".join(functions) or "none"
            raise ConfigError(f"tool_choice names the function {name!r}, which is not among the tools (offered: {offered}); name one of them.")
        index = list(functions).index(name)
        schema = _call_schema(name, functions[name], f"tools[{index}].function.parameters")
        return cls("json_schema", json.dumps(schema, separators=(",", ":")), "tool_call", True, f"tools[{index}].function.parameters")


def _call_schema(name: str, function: dict[str, Any], where: str) -> dict[str, Any]:
    """One call of a function, as the reply parser reads it: {"name": ..., "arguments": {...}}."""
    parameters = function.get("parameters") or {"type": "object"}
    check_schema(parameters, where)
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def check_schema(schema: Any, where: str = "schema") -> None:
    """A ConfigError naming the part of ``schema`` that is no valid JSON Schema, uses a keyword
    replies cannot be held to, or would make a grammar too large."""
    import jsonschema

    if not isinstance(schema, dict):
        raise ConfigError(f"{where} must be a JSON Schema object, like {{\"type\": \"object\", \"properties\": {{...}}}}; got {json.dumps(schema)[:100]}.")
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_CHARS:
        raise ConfigError(f"{where} is {size:,} characters long; a reply schema can be at most {MAX_SCHEMA_CHARS:,}. Shorten it.")
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise ConfigError(f"{_path(where, error.absolute_path)} is not valid JSON Schema: {error.message}.") from None
    except ValueError:  # Python's re reading a pattern's bound of thousands of digits
        raise ConfigError(
            f"{where} holds a number thousands of digits long, such as a pattern's {{m,n}} bound; a reply schema's "
            f"repetitions can write out at most {MAX_PATTERN_SIZE:,} pieces."
        ) from None
    if _check_part(schema, where, 0) > MAX_PATTERN_SIZE:
        raise ConfigError(
            f"{where}'s patterns together write out more than {MAX_PATTERN_SIZE:,} pieces once their {{m,n}} repetitions are "
            "multiplied out, which would make the reply's grammar too costly to build. Use fewer patterns or smaller bounds, "
            "or + and * where no bound is needed."
        )


def _check_part(schema: Any, where: str, depth: int) -> int:
    """Checks ``schema`` and the parts inside it; returns how many pieces their patterns write out."""
    if not isinstance(schema, dict):
        return 0  # true / false schemas
    if depth > MAX_DEPTH:
        raise ConfigError(f"{where} is nested {depth} levels deep; a reply schema can nest at most {MAX_DEPTH}.")
    for keyword in schema:
        if keyword not in KEYWORDS:
            raise ConfigError(
                f"{where} uses the keyword {keyword!r}, which replies cannot be held to here. "
                f"Supported: {', '.join(sorted(KEYWORDS - ANNOTATIONS))} (and annotations such as title and description)."
            )
    for keyword in _REPEATS:
        if isinstance(schema.get(keyword), int) and schema[keyword] > MAX_REPEAT:
            raise ConfigError(f"{where}.{keyword} is {schema[keyword]:,}; at most {MAX_REPEAT:,} keeps the reply's grammar small.")
    if "format" in schema and schema["format"] not in FORMATS:
        raise ConfigError(f"{where}.format {schema['format']!r} is not supported; formats: {', '.join(sorted(FORMATS))} (or use a pattern).")
    if "pattern" in schema and ("minLength" in schema or "maxLength" in schema):
        raise ConfigError(f"{where} has both a pattern and a length; put the length into the pattern (like {{1,20}}).")
    pieces = pattern_size(schema["pattern"]) if isinstance(schema.get("pattern"), str) else 0
    if pieces > MAX_PATTERN_SIZE:
        raise ConfigError(
            f"{where}.pattern writes out more than {MAX_PATTERN_SIZE:,} pieces once its {{m,n}} repetitions are multiplied out, "
            "which would make the reply's grammar too large. Use smaller bounds, or + and * where no bound is needed."
        )
    if len(schema.get("allOf", [])) > 1:
        raise ConfigError(f"{where}.allOf has {len(schema['allOf'])} parts; a reply schema takes one (merge them into one schema).")
    properties = schema.get("properties", {})
    if len(properties) > MAX_PROPERTIES:
        raise ConfigError(f"{where}.properties has {len(properties)} properties; at most {MAX_PROPERTIES} per object keep the reply's grammar small.")
    for part_where, part in subschemas(schema, where):
        pieces += _check_part(part, part_where, depth + 1)
    return pieces


def pattern_size(pattern: str) -> int:
    """How many pieces (characters, classes, escapes) ``pattern`` amounts to with each {m,n}
    written out as a grammar converter writes it: the repeated piece or group times its larger
    bound, nested repetitions multiplied. Counted from the text alone, before any regular
    expression engine or converter sees it; beyond MAX_PATTERN_SIZE the count stops growing."""
    groups = [0]  # the size of each group open at this point, the whole pattern first
    last = 0  # the size of the piece a quantifier here would repeat
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "{" and (quantifier := _QUANTIFIER.match(pattern, index)):
            bound = quantifier[2] or quantifier[1] or quantifier[3]
            times = int(bound) if len(bound) <= 9 else 10**9
            groups[-1] += last * (times - 1)
            last = min(last * times, MAX_PATTERN_SIZE + 1)
            groups[-1] = min(groups[-1], MAX_PATTERN_SIZE + 1)
            index = quantifier.end()
            continue
        if char == "(":
            groups.append(0)
            last = 0
        elif char == ")" and len(groups) > 1:
            last = groups.pop()
            groups[-1] += last
        else:
            index = _piece_end(pattern, index) - 1
            groups[-1] += 1
            last = 1
        index += 1
    return min(sum(groups), MAX_PATTERN_SIZE + 1)


def _piece_end(pattern: str, index: int) -> int:
    """Where the piece at ``index`` ends: after an escape's next character, after a class's closing bracket."""
    if pattern[index] == "\\":
        return index + 2
    if pattern[index] != "[":
        return index + 1
    end = index + 1
    end += pattern.startswith("^", end)
    end += pattern.startswith("]", end)  # a ] first in a class is one of its characters
    while end < len(pattern) and pattern[end] != "]":
        end += 2 if pattern[end] == "\\" else 1
    return end + 1


def subschemas(schema: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """The schemas directly inside ``schema``, each with its path."""
    parts = []
    for keyword in ("properties", "$defs", "definitions"):
        parts += [(f"{where}.{keyword}.{name}", part) for name, part in schema.get(keyword, {}).items()]
    for keyword in ("items", "additionalProperties"):
        if isinstance(schema.get(keyword), dict):
            parts.append((f"{where}.{keyword}", schema[keyword]))
    for keyword in ("prefixItems", "anyOf", "oneOf", "allOf"):
        parts += [(f"{where}.{keyword}[{index}]", part) for index, part in enumerate(schema.get(keyword, []))]
    return [(part_where, part) for part_where, part in parts if isinstance(part, dict)]


def failing_part(schema: dict[str, Any], where: str, fails: Callable[[dict[str, Any]], bool]) -> str:
    """The path of the innermost part of ``schema`` that ``fails`` on its own (``where`` if none
    does), to name in an error. Parts that refer elsewhere ($ref) cannot stand alone, and are skipped."""
    for part_where, part in subschemas(schema, where):
        if "$ref" not in json.dumps(part) and fails(part):
            return failing_part(part, part_where, fails)
    return where


def _path(where: str, parts: Any) -> str:
    return where + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


class ReplyFormatChoice(Settings):
    """The reply format as the page chooses it: a kind, and for json_schema the schema as JSON text."""

    kind = "reply format"

    reply_format: Literal["text", "json_object", "json_schema"] = Field(
        "text", description="free text, any JSON object, or JSON that follows reply_schema",
        json_schema_extra=page_control("Format", info="text: free; json_object: any JSON object; json_schema: JSON that follows the schema below"),
    )
    reply_schema: str = Field("", description="the JSON Schema a json_schema reply follows, as JSON text",
                              json_schema_extra=page_control("JSON schema", lines=5, placeholder='{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'))

    def chosen(self) -> ReplyFormat | None:
        """The reply format chosen (None for text), or a ConfigError saying what is wrong with the schema text."""
        if self.reply_format == "text":
            return None
        if self.reply_format == "json_object":
            return ReplyFormat.json_object()
        text = self.reply_schema.strip()
        if not text:
            raise ConfigError("The reply format is json_schema but the JSON schema is empty: write the schema, or pick another reply format.")
        if len(text) > MAX_SCHEMA_CHARS:
            raise ConfigError(f"The JSON schema is {len(text):,} characters long; a reply schema can be at most {MAX_SCHEMA_CHARS:,}. Shorten it.")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"The JSON schema is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}).") from None
        return ReplyFormat.json_schema(schema)
