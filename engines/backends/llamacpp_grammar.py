"""Reply formats as llama.cpp grammars (GBNF), for the llamacpp backend's grammar sampler.

llama-cpp-python's own converter (``llama_cpp.llama_grammar``) writes the grammar of a JSON
schema. Two things it leaves out are added here, so that what it writes keeps to the schema:
integer bounds (minimum, maximum and their exclusive forms), and JSON's rule that a string holds
no raw control character (its ``char`` rule lets a newline into a string, which no JSON parser
reads). Bounds on numbers with fractions it cannot write, so such a schema is refused.

GrammarSampler applies the grammar beside a reply's sampler chain, as llama.cpp's own common
sampler does: the chain draws from the model's logits, the grammar checks that one token, and
only where it refuses it is the whole vocabulary masked by the grammar and drawn from again.
(Walking the grammar for each of the default model's 49,152 tokens at every step took most of
the decode time; bench/structured_decode.py measures what is left.) Drawing again from the masked logits after a refusal samples exactly the
masked distribution, and greedy decoding picks the same token as masking first would.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
from llama_cpp import llama_cpp as lib
from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

from ..errors import ConfigError
from ..reply_format import ReplyFormat, failing_part

# A JSON string's character: anything but a quote, a backslash or a control character, or an escape.
JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def gbnf(reply_format: ReplyFormat) -> str:
    """The grammar of ``reply_format``'s schema, or a ConfigError naming the part it cannot write."""
    try:
        return _grammar(reply_format.schema)
    except (ValueError, AssertionError, KeyError, TypeError) as error:
        where = failing_part(reply_format.schema, reply_format.where, lambda part: not _writes(part))
        # Our own refusals (a ConfigError is a ValueError) say why; the converter's need saying whose.
        reason = error if isinstance(error, ConfigError) else f"llama.cpp's grammar converter cannot write it ({error})."
        raise ConfigError(f"{where}: {reason}") from None


def _grammar(schema: dict[str, Any]) -> str:
    converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "input"), "")
    if "char" in converter._rules:
        converter._rules["char"] = JSON_CHAR
    return converter.format_grammar()


def _writes(schema: dict[str, Any]) -> bool:
    try:
        _grammar(schema)
    except (ValueError, AssertionError, KeyError, TypeError):
        return False
    return True


class _Converter(SchemaConverter):
    def visit(self, schema: dict[str, Any], name: str) -> str:
        if isinstance(schema.get("type"), list):
            # The converter would make each type a bare {"type": t}, dropping the rest (bounds, lengths).
            return super().visit({"anyOf": [{**schema, "type": kind} for kind in schema["type"]]}, name)
        bounded = [keyword for keyword in _BOUNDS if keyword in schema]
        # Bounds hold numbers only: on a string or null they say nothing.
        if not bounded or schema.get("type") not in ("integer", "number", None):
            return super().visit(schema, name)
        if schema.get("type") != "integer":
            raise ConfigError(
                f"The schema bounds a number that may have a fraction ({', '.join(bounded)} on type {schema.get('type')!r}); "
                "llama.cpp's grammars bound whole numbers only. Use type integer, or load the model on the huggingface or vllm backend."
            )
        low, high = _integer_bounds(schema)
        if low is not None and high is not None and low > high:
            raise ConfigError(f"The schema's integer bounds leave no number ({', '.join(f'{k}={schema[k]}' for k in bounded)}).")
        rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
        return self._add_rule(rule_name, f"({integer_range(low, high)}) space")


def _integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
    lows += [math.floor(schema["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in schema else []
    highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
    highs += [math.ceil(schema["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in schema else []
    return max(lows, default=None), min(highs, default=None)


def integer_range(low: int | None, high: int | None) -> str:
    """GBNF for the decimal integers from ``low`` to ``high`` (None: no bound), as JSON writes them."""
    parts = []
    if low is None or low < 0:
        # The negative numbers, by their magnitudes.
        smallest = 1 if high is None or high >= 0 else -high
        parts.append(f'"-" ({_naturals(smallest, None if low is None else -low)})')
    if high is None or high >= 0:
        parts.append(_naturals(max(low or 0, 0), high))
    return " | ".join(f"({part})" for part in parts)


def _naturals(low: int, high: int | None) -> str:
    """The whole numbers from ``low`` to ``high`` (None: no bound), without leading zeros: one
    alternative per count of digits."""
    digits = len(str(low))
    if high is None:
        return f"{_same_length(str(low), '9' * digits)} | [1-9] [0-9]{{{digits},}}"
    alternatives = []
    for length in range(digits, len(str(high)) + 1):
        start = max(low, 10 ** (length - 1) if length > 1 else 0)
        end = min(high, 10**length - 1)
        alternatives.append(f"({_same_length(str(start), str(end))})")
    return " | ".join(alternatives)


def _same_length(low: str, high: str) -> str:
    """The numbers from ``low`` to ``high``, both written with the same count of digits."""
    if low == high:
        return f'"{low}"'
    rest = len(low) - 1
    if rest == 0:
        return f"[{low}-{high}]"
    if set(low[1:]) == {"0"} and set(high[1:]) == {"9"}:
        return f"[{low[0]}-{high[0]}] [0-9]{{{rest}}}"
    if low[0] == high[0]:
        return f'"{low[0]}" ({_same_length(low[1:], high[1:])})'
    parts = [f'"{low[0]}" ({_same_length(low[1:], "9" * rest)})']
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}] [0-9]{{{rest}}}")
    parts.append(f'"{high[0]}" ({_same_length("0" * rest, high[1:])})')
    return " | ".join(parts)


_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class GrammarSampler:
    """One reply's grammar (a llama.cpp grammar sampler) and the candidates buffer it masks."""

    def __init__(self, vocab: Any, grammar: bytes, n_vocab: int) -> None:
        self._grammar = lib.llama_sampler_init_grammar(vocab, grammar, b"root")
        self._n_vocab = n_vocab
        self._all = (lib.llama_token_data * n_vocab)()
        self._view = np.frombuffer(self._all, dtype=_TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._one = (lib.llama_token_data * 1)()

    def sample(self, chain: Any, ctx: Any, index: int) -> int:
        """The next token from the logits of batch row ``index``, drawn by ``chain`` within the
        grammar; the chain and the grammar both take it."""
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, index), shape=(self._n_vocab,))
        token = self._draw(chain, logits, masked=False)
        self._one[0].id, self._one[0].logit, self._one[0].p = token, float(logits[token]), 0.0
        single = lib.llama_token_data_array(self._one, 1, -1, False)
        lib.llama_sampler_apply(self._grammar, ctypes.byref(single))
        if self._one[0].logit == -math.inf:
            token = self._draw(chain, logits, masked=True)
        lib.llama_sampler_accept(self._grammar, token)
        lib.llama_sampler_accept(chain, token)
        return token

    def _draw(self, chain: Any, logits: np.ndarray, masked: bool) -> int:
        self._view["id"], self._view["logit"], self._view["p"] = self._ids, logits, 0.0
        candidates = lib.llama_token_data_array(self._all, self._n_vocab, -1, False)
        if masked:
            lib.llama_sampler_apply(self._grammar, ctypes.byref(candidates))
        lib.llama_sampler_apply(chain, ctypes.byref(candidates))
        return int(candidates.data[candidates.selected].id)

    def free(self) -> None:
        lib.llama_sampler_free(self._grammar)
