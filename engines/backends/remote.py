"""The remote backend: a model that another server runs, reached through its OpenAI-compatible API.

``vllm serve``, SGLang's server, llama-server, llama-cpp-python's server, Ollama or another
anychat runs the model; each request goes to it as a streamed chat completion (a completion's
prompt as a text completion). What every backend shares stays here as on the others: the request's
checks, the waiting line (``max_concurrent`` requests go upstream at once) and the reply read into
reasoning, content and tool calls. The upstream server renders the prompt with its own chat
template and counts the tokens, so this engine has neither a template nor a tokenizer: lengths are
the ones the server reports (estimated where it reports none).

What the server sends as parts of its own (``reasoning_content``, ``tool_calls``) is handed on as
parts, never written into text to be read again: its reasoning word for word, its tool calls under
the server's ids. The answer's text is read as a local model's (a server without a tool-call or
reasoning parser of its own sends the model's markers in it), so that the page, the API and the
agent loop read a remote reply as a local one. Leaving a reply early closes its HTTP request, and
servers stop generating for a client that left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..compaction import SUMMARY_MARK
from ..errors import ChatError, ConfigError, ContextLearnedError, MediaError, ModelBusyError, ModelLoadError, UnsupportedError
from ..generation_args import GenerationArgs
from ..logprobs import Logprob, TokenLogprobs
from ..model_files import Progress
from ..model_files.model_args import ModelArgs
from ..model_files.server_address import server_address, shown_address
from ..prompt.builder import Prompt
from ..prompt.reply_parser import ReplyChunk, ToolCall, new_call_id
from ..reply_format import ReplyFormat
from ..request import MEDIA_KINDS, ChatRequest, MediaKind
from .base import BaseEngine, Response, read_reply
from .remote_media import with_media_parts

logger = logging.getLogger(__name__)

# Seconds to open a connection to the server, and the longest silence within a reply (a long
# prompt is read before the first token comes): past either, the request ends with a clear error
# and gives its place in line back.
CONNECT_SECONDS = 10.0
# The most a prompt's count from the server may take; past it the count is estimated.
COUNT_SECONDS = 10.0
SILENCE_SECONDS = 300.0
# How long an idle connection to the server is kept for the next request: under the 5 s after
# which uvicorn (vLLM's, SGLang's, llama-cpp-python's and anychat's server) closes it. At httpx's
# own default, 5 s, a request could go out on a connection the server was closing.
KEEPALIVE_SECONDS = 2.0
# What one reply may send: a line of its event stream, and all of it (a server sending without
# end would otherwise fill this one's memory).
MAX_LINE_BYTES = 1 << 20
MAX_REPLY_BYTES = 64 << 20
# How much of an error's body the message quotes.
ERROR_QUOTE = 300
# What English text and code come to in the common tokenizers, about: how a remote model's
# tokens are estimated where the server has not counted them.
CHARACTERS_PER_TOKEN = 4
# How long a request asks again where the server says it is busy (429, 503: its line is full, or
# still ending a reply it was told to stop), as its Retry-After says, before saying so.
BUSY_WAIT_SECONDS = 10.0


@dataclass
class RemotePrompt(Prompt):
    """A request as the upstream server takes it: ``body``, the chat completion's (or text
    completion's) fields other than sampling; ``path``, where it goes."""

    body: dict[str, Any] = field(default_factory=dict)
    path: str = "/chat/completions"


# The fields of a chat's request that the server's /tokenize reads too (vLLM's and SGLang's).
TEMPLATE_FIELDS = ("model", "messages", "tools", "add_generation_prompt", "continue_final_message", "chat_template_kwargs")


class RemotePrompts:
    """The part of a PromptBuilder a remote model has: its generation defaults and the request's
    checks; the messages go upstream as they are (media as content parts), for the server's own
    template and processor. ``media_kinds``: what the server says the model reads, where it says
    (anychat's /v1/models does); all kinds where it does not, and the server refuses what it cannot read."""

    tokenizer = None
    can_generate = True

    def __init__(self, model_id: str, defaults: GenerationArgs, context_length: int | None, media_kinds: frozenset[MediaKind]) -> None:
        self.model_id = model_id
        self.defaults = defaults
        self.context_length = context_length
        self.media_kinds = media_kinds

    def generation(self, request: ChatRequest) -> GenerationArgs:
        for kind in request.media:
            if kind not in self.media_kinds:
                raise MediaError(f"This model does not accept {kind}s (its server says it reads {', '.join(['text', *sorted(self.media_kinds)])}). "
                                 f"Remove the {kind} or load a model that takes {kind}s.")
        return self.defaults.replace(**request.generation)

    def render(self, request: ChatRequest, generation: GenerationArgs) -> str:
        if request.prompt is not None and isinstance(request.prompt, str):
            return request.prompt
        raise UnsupportedError("A remote server renders the prompt with its own chat template: its text is not known here.")

    def prepare(self, request: ChatRequest, generation: GenerationArgs) -> RemotePrompt:
        body: dict[str, Any] = {"model": self.model_id}
        if request.prompt is not None:
            body["prompt"] = request.prompt if isinstance(request.prompt, str) else list(request.prompt)
            return RemotePrompt(request, generation, "", [], body=body, path="/completions")
        body["messages"] = with_media_parts([as_sent(message) for message in request.messages], request.media)
        if request.tools:
            body["tools"] = request.tools
        if request.continue_final_message:
            # vLLM's and SGLang's name; a server without it answers the conversation as it is.
            body.update(continue_final_message=True, add_generation_prompt=False)
        template_kwargs = dict(request.template_kwargs)
        if generation.enable_thinking is not None:
            template_kwargs["enable_thinking"] = generation.enable_thinking
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        if generation.reasoning_effort is not None:
            body["reasoning_effort"] = generation.reasoning_effort
        if request.reply_format is not None:
            body.update(reply_format_fields(request.reply_format))
        return RemotePrompt(request, generation, "", [], body=body)


def as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A message as OpenAI's API takes it: tool calls' arguments as JSON text (a chat template,
    and so the request, may hold them as a mapping), without the mark of a summary (a field of
    this app's own, which a strict server refuses)."""
    message = {key: value for key, value in message.items() if key != SUMMARY_MARK}
    if not message.get("tool_calls"):
        return message
    return {**message, "tool_calls": [{**call, "function": {**call["function"], "arguments": as_text(call["function"]["arguments"])}}
                                      for call in message["tool_calls"]]}


def as_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def reply_format_fields(reply_format: ReplyFormat) -> dict[str, Any]:
    """``reply_format`` as OpenAI's ``response_format``. A forced tool call goes the same way, as
    JSON of the call (what every backend here decodes it as, and the reply parser reads as the
    call), rather than as ``tool_choice``: a server decodes that only where its operator set up a
    tool-call parser, and vLLM's, given one, did not hold the arguments to their schema."""
    if reply_format.kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": reply_format.name, "schema": reply_format.schema,
                                                                        "strict": reply_format.strict}}}


def sampling(args: GenerationArgs) -> dict[str, Any]:
    """The sampling fields of a request: OpenAI's, and where they differ from neutral the ones
    vLLM, SGLang, llama.cpp and anychat take besides (top_k, min_p, repetition_penalty)."""
    fields: dict[str, Any] = {"max_tokens": args.max_new_tokens, "temperature": 0.0 if args.greedy else args.temperature}
    if not args.greedy:
        fields["top_p"] = args.top_p
        if args.top_k:
            fields["top_k"] = args.top_k
        if args.min_p:
            fields["min_p"] = args.min_p
    if args.repetition_penalty != 1.0:
        fields["repetition_penalty"] = args.repetition_penalty
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(args, name):
            fields[name] = getattr(args, name)
    if args.stop:
        fields["stop"] = list(args.stop)
    if args.seed is not None:
        fields["seed"] = args.seed
    if args.logprobs is not None:
        fields.update(logprobs=True, top_logprobs=args.logprobs)
    if not args.skip_special_tokens:
        fields["skip_special_tokens"] = False
    return fields


class ToolCallPieces:
    """The tool calls a server streams, put together from their pieces (OpenAI's ``tool_calls``
    deltas: each names its call by index, gives its id and name once, and its arguments in pieces)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def push(self, pieces: Any) -> str:
        """What to show of ``pieces`` while the calls are written: each call's name, then its arguments."""
        shown = ""
        for piece in pieces:
            function = piece.get("function") or {}
            call = self._calls.setdefault(piece.get("index", 0), {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or piece.get("id") or ""
            if function.get("name") and not call["name"]:
                call["name"] = function["name"]
                shown += ("\n" if len(self._calls) > 1 else "") + call["name"] + " "
            call["arguments"] += function.get("arguments") or ""
            shown += function.get("arguments") or ""
        return shown

    def finish(self) -> list[ToolCall]:
        """The calls, once the reply is complete, under the server's ids (a new one where it gave none)."""
        return [ToolCall(name=call["name"], arguments=call["arguments"], id=call["id"] or new_call_id()) for call in self._calls.values()]


def reply_items(delta: dict[str, Any], calls: ToolCallPieces) -> list[str | ReplyChunk]:
    """What one streamed ``delta`` adds to the reply: its reasoning as a chunk, its answer as the
    text the reply parser reads, and what to show of the tool calls it writes (``calls`` keeps them)."""
    items: list[str | ReplyChunk] = []
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning:
        items.append(ReplyChunk("reasoning", reasoning))
    if delta.get("content"):
        items.append(delta["content"])
    if shown := calls.push(delta.get("tool_calls") or ()):
        items.append(ReplyChunk("tool_call", shown))
    return items


class RemoteEngine(BaseEngine):
    name = "remote"
    generation_settings = frozenset({"min_p", "presence_penalty", "frequency_penalty", "logprobs"})

    def __init__(self, model_args: ModelArgs, generation: dict[str, Any] | None = None, progress: Progress | None = None) -> None:
        import httpx

        report = progress or (lambda fraction, message: None)
        self.model_args = model_args
        self.address = server_address(model_args.model_name_or_path or "")
        shown = shown_address(self.address)
        key = model_args.remote_api_key.get_secret_value() if model_args.remote_api_key else None
        report(0.1, f"Asking {shown} which models it serves…")
        card = model_card(served_models(self.address, key), model_args.remote_model, shown)
        self.upstream_model = card["id"]
        context = card.get("max_model_len") or card.get("context_length")
        self.prompts = RemotePrompts(self.upstream_model, GenerationArgs().replace(**(generation or {})),
                                     context if isinstance(context, int) and context > 0 else None, media_kinds_of(card))
        # Redirects are not followed: one could send the key and the conversations to another host.
        self._client = httpx.AsyncClient(
            base_url=self.address, headers=bearer(key), follow_redirects=False,
            timeout=httpx.Timeout(SILENCE_SECONDS, connect=CONNECT_SECONDS),
            limits=httpx.Limits(max_connections=model_args.max_concurrent, max_keepalive_connections=model_args.max_concurrent,
                                keepalive_expiry=KEEPALIVE_SECONDS),
        )
        self._open = 0
        # Where servers count prompts: vLLM's and SGLang's at their root, anychat's beside its API.
        self._count_addresses = [f"{self.address.removesuffix('/v1')}/tokenize", f"{self.address}/tokenize"]
        self.counts_prompts_exactly = True
        report(1.0, f"{shown} serves {self.upstream_model}.")

    @property
    def model_id(self) -> str:
        return self.model_args.served_model_name or self.upstream_model

    def count_tokens(self, text: str) -> int:
        """An estimate, CHARACTERS_PER_TOKEN bytes a token: the server's tokenizer is out of reach
        without a request, and the page asks on its event loop (a stopped reply's length, the
        documents in the box). What the server answers (every finished reply's lengths) is exact."""
        return -(-len(text.encode()) // CHARACTERS_PER_TOKEN)

    def count_prompt_tokens(self, request: ChatRequest) -> int:
        """The server's own count of the prompt, with its own template, where it counts one (vLLM's
        and SGLang's ``/tokenize`` of a chat's messages, anychat's ``/v1/tokenize``); else an estimate (count_tokens) of the
        messages and tools as they are sent, and ``counts_prompts_exactly`` says so from then on.
        Asks the server: call it off the event loop."""
        if self.counts_prompts_exactly and request.prompt is None and not request.media:
            counted = self._servers_count(request)
            if counted is not None:
                return counted
        return self.count_tokens(json.dumps([request.messages, request.tools, request.prompt], ensure_ascii=False))

    def _servers_count(self, request: ChatRequest) -> int | None:
        """The server's count of ``request``'s prompt; None where it could not count it this time
        (and for good where it has no such endpoint)."""
        import httpx

        # What the reply's own request sends that the server's template reads (thinking switched on
        # or off changes the prompt): counted as it will be rendered.
        sent = self.prompts.prepare(request, self.prompts.generation(request)).body
        body = {"add_generation_prompt": True, **{field: value for field, value in sent.items() if field in TEMPLATE_FIELDS}}
        for address in self._count_addresses:
            try:
                response = httpx.post(address, json=body, headers=self._client.headers, follow_redirects=False,
                                      timeout=httpx.Timeout(COUNT_SECONDS))
            except httpx.HTTPError as error:
                logger.warning("The remote server did not count the prompt (%s); it is estimated.", error)
                return None
            try:
                answer = response.json() if response.is_success else None
            except ValueError:
                answer = None
            count = answer.get("count") if isinstance(answer, dict) else None
            if isinstance(count, int):
                self._count_addresses = [address]
                return count
            if not (response.status_code in (404, 405) or response.is_success):
                return None  # it failed this time (busy, or a message it could not count): estimated, and asked again next time
        self.counts_prompts_exactly = False  # no such endpoint, or one that answers something else
        return None

    def _compile_reply_format(self, reply_format: ReplyFormat) -> ReplyFormat:
        # The server checks and enforces the format itself.
        return reply_format

    # ---- generation

    async def _complete(self, prompt: Prompt, args: GenerationArgs) -> list[Response]:
        # One after another: the request holds one place in line, so it sends one request at a time
        # (max_concurrent is what the server is sent at once), and not every server takes OpenAI's n.
        seeds = [None if args.seed is None else args.seed + index for index in range(args.num_return_sequences)]
        return [await self._whole(prompt, args.replace(num_return_sequences=1, seed=seed)) for seed in seeds]

    async def _whole(self, prompt: Prompt, args: GenerationArgs) -> Response:
        # Read here, as stream_replies reads it: the parts the server sent apart are not in its text.
        async with contextlib.aclosing(self._stream(prompt, args)) as items, contextlib.aclosing(read_reply(prompt, items, raw=True)) as reply:
            async for item in reply:
                if isinstance(item, Response):
                    return item
        raise ChatError("The remote server ended the reply without finishing it.")

    async def _stream(self, prompt: Prompt, args: GenerationArgs) -> AsyncIterator[str | ReplyChunk | ToolCall | TokenLogprobs | Response]:
        import httpx

        assert isinstance(prompt, RemotePrompt)
        body = {**prompt.body, **sampling(args), "stream": True, "stream_options": {"include_usage": True}}
        text, calls = "", ToolCallPieces()
        logprobs: list[TokenLogprobs] | None = None if args.logprobs is None else []
        finish_reason: str | None = None
        usage: dict[str, Any] = {}
        written = 0
        self._open += 1
        try:
            async with contextlib.aclosing(self._events(prompt.path, body)) as answer:
                async for event in answer:
                    if event.get("usage"):
                        usage = event["usage"]
                    for choice in event.get("choices") or ():
                        for token in (choice.get("logprobs") or {}).get("content") or ():
                            if logprobs is not None:
                                logprobs.append(token_logprobs(token))
                                yield logprobs[-1]
                        delta = (choice.get("delta") if "delta" in choice else {"content": choice.get("text")}) or {}
                        if items := reply_items(delta, calls):
                            written += 1
                            text += delta.get("content") or ""
                            for item in items:
                                yield item
                        finish_reason = choice.get("finish_reason") or finish_reason
        except httpx.TimeoutException as error:
            raise ChatError(f"The remote server {shown_address(self.address)} sent nothing for too long ({type(error).__name__}); "
                            "it may be overloaded or stuck. Try again, or ask its operator.") from error
        except httpx.HTTPError as error:
            raise ChatError(f"The remote server {shown_address(self.address)} could not be reached or cut the reply off: {str(error) or type(error).__name__}. "
                            "Try again; if it goes on, check that the server runs.") from error
        finally:
            self._open -= 1
        if finish_reason is None and not written:
            if self.prompts.context_length is None and not prompt.request.media:
                await self._learn_context(prompt.path, prompt.body)
            raise ChatError(f"The remote server {shown_address(self.address)} ended the reply without writing any of it: it may not "
                            "read what was sent (media, where its model reads text only); its log says why. Change the message and try again.")
        if finish_reason is None:
            raise ChatError(f"The remote server {shown_address(self.address)} ended the reply before finishing it. Try again.")
        for call in calls.finish():
            yield call
        yield Response(
            response_text=text,
            # A server that does not count in its stream (llama-cpp-python's) sends a token an event,
            # and the prompt is estimated.
            response_length=int(usage.get("completion_tokens") or written),
            prompt_length=int(usage.get("prompt_tokens") or self.count_prompt_tokens(prompt.request)),
            finish_reason="length" if finish_reason == "length" else "stop",
            logprobs=None if logprobs is None else tuple(logprobs),
        )

    async def _learn_context(self, path: str, body: dict[str, Any]) -> None:
        """After a streamed reply ended without a word: the same request not streamed, cut to one
        token, whose refusal says why where the prompt was longer than the context (llama-cpp-python's
        server says so only when not streamed), and the context's length with it: a
        ContextLearnedError. Anything else, and the stream's own error stands."""
        import httpx

        for last_try in (False, True):
            try:
                async with self._answer(path, {**body, "max_tokens": 1}):
                    return
            except ContextLearnedError:
                raise
            except ChatError:
                return
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                # The failed stream's connection, which the server closes after it (see _events).
                if last_try:
                    return

    async def _events(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The events of the server's streamed answer to ``body``, asked once more where the
        connection broke before the first of them came (before its headers or after): nothing of
        the reply was read, so nothing is written twice, and httpx drops a broken connection, so the
        second request goes out on another. llama-cpp-python's server needs it: a reply it fails (an
        image its text model cannot read) it ends as an empty stream and only then, as the error
        reaches uvicorn, closes the connection; the next request, sent on it as soon as that stream
        ended, dies there, before its 200 or after it (24 and 10 of 40 such requests here)."""
        import httpx

        for last_try in (False, True):
            received = False
            try:
                async with self._answer(path, body) as response:
                    async for event in events(response):
                        received = True
                        yield event
                return
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                if received or last_try:
                    raise

    @contextlib.asynccontextmanager
    async def _answer(self, path: str, body: dict[str, Any]) -> AsyncIterator[Any]:
        """The server's streamed answer to ``body``, asked again for a while where it is busy;
        a ChatError where it refuses or fails."""
        until = time.monotonic() + BUSY_WAIT_SECONDS
        while True:
            response = await self._client.send(self._client.build_request("POST", path.lstrip("/"), json=body), stream=True)
            try:
                if response.status_code == 200:
                    yield response
                    return
                pause = busy_pause(response, until)
                if pause is None:
                    error = await refusal(response)
                    if isinstance(error, ContextLearnedError) and self.prompts.context_length is None:
                        self.prompts.context_length = error.context
                    body = schema_in_json_object(body, error)
                    if body is None:
                        raise error
                    pause = 0.0
            finally:
                await response.aclose()
            await asyncio.sleep(pause)

    def unfinished_requests(self) -> int:
        # Requests whose HTTP connection is open: closing one is how the server is told to stop.
        return self._open

    # ---- lifetime

    async def close(self) -> None:
        await self._client.aclose()


def schema_in_json_object(body: dict[str, Any], refused: ChatError) -> dict[str, Any] | None:
    """``body`` with its JSON schema given as llama-cpp-python's server takes one (inside a
    ``json_object`` response format, enforced by a grammar), where the server refused OpenAI's
    ``json_schema`` type; None where the refusal was about something else."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") != "json_schema" or "json_schema" not in str(refused):
        return None
    return {**body, "response_format": {"type": "json_object", "schema": response_format["json_schema"]["schema"]}}


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def served_models(address: str, key: str | None) -> list[dict[str, Any]]:
    """The entries of the models server ``address`` lists (its ``/models``), or a ModelLoadError
    saying why there are none: each a clear message, read from no more than MAX_LINE_BYTES."""
    import httpx

    shown = shown_address(address)
    try:
        with httpx.stream("GET", f"{address}/models", headers=bearer(key), follow_redirects=False,
                          timeout=httpx.Timeout(SILENCE_SECONDS, connect=CONNECT_SECONDS)) as response:
            body = b""
            for data in response.iter_raw():
                body += data
                if len(body) > MAX_LINE_BYTES:
                    raise ModelLoadError(f"{shown} sent more than {MAX_LINE_BYTES >> 20} MiB for its list of models, which no list needs: "
                                         "is it an OpenAI-compatible server?")
    except httpx.HTTPError as error:
        raise ModelLoadError(f"Could not reach a server at {shown}: {error}. Check the address and that the server runs.") from error
    if response.status_code in (401, 403):
        raise ModelLoadError(f"The server at {shown} refused the API key ({response.status_code}): give the key it expects (remote_api_key).")
    if response.is_redirect:
        raise ModelLoadError(f"The server at {shown} sends requests elsewhere ({response.status_code}); give the address it redirects "
                             "to, if you trust it: redirects are not followed, so that no key or conversation goes to another host.")
    try:
        models = [card for card in json.loads(body)["data"] if isinstance(card, dict) and isinstance(card.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        models = None
    if response.status_code != 200 or models is None:
        raise ModelLoadError(f"{shown} did not answer as an OpenAI-compatible server (GET /models gave {response.status_code}: "
                             f"{body[:ERROR_QUOTE].decode(errors='replace')!r}). Give the address of its API, usually ending in /v1.")
    if not models:
        raise ModelLoadError(f"The server at {shown} serves no model yet. Load one there, then try again.")
    return models


def model_card(models: list[dict[str, Any]], wanted: str | None, shown: str) -> dict[str, Any]:
    """The entry of model ``wanted`` (None: the first) among a server's ``models``, or a ModelLoadError naming those it serves."""
    if wanted is None:
        return models[0]
    for card in models:
        if card["id"] == wanted:
            return card
    raise ModelLoadError(f"The server at {shown} does not serve {wanted!r}; it serves {', '.join(card['id'] for card in models)}.")


def media_kinds_of(card: dict[str, Any]) -> frozenset[MediaKind]:
    """The media a model reads, as its server's /models entry says (``input_modalities``, as
    anychat and OpenRouter give them); every kind where it does not say."""
    said = card.get("input_modalities")
    if not isinstance(said, list):
        return frozenset(MEDIA_KINDS)
    return frozenset(kind for kind in MEDIA_KINDS if kind in said)


async def events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream, until ``[DONE]``; a ChatError where a line
    or the whole reply is beyond what any reply needs, or an event is not JSON."""
    buffer, received = b"", 0
    async for data in response.aiter_raw():
        received += len(data)
        if received > MAX_REPLY_BYTES:
            raise ChatError(f"The remote server sent more than {MAX_REPLY_BYTES >> 20} MiB for one reply; it was cut off there.")
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        if len(buffer) > MAX_LINE_BYTES:
            raise ChatError(f"The remote server sent a line of more than {MAX_LINE_BYTES >> 20} MiB, which no reply needs; it was cut off.")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                event = json.loads(payload)
            except ValueError:
                raise ChatError(f"The remote server sent something other than OpenAI's events: {payload[:ERROR_QUOTE]!r}") from None
            if not isinstance(event, dict):
                raise ChatError(f"The remote server sent something other than OpenAI's events: {payload[:ERROR_QUOTE]!r}")
            if "error" in event:
                raise ChatError(f"The remote server stopped the reply: {error_message(event)}")
            yield event


def busy_pause(response: Any, until: float) -> float | None:
    """How long to wait before asking again a server that said it is busy, as its Retry-After
    says (a second where it says nothing); None where it refused for another reason, or ``until`` has come."""
    left = until - time.monotonic()
    if response.status_code not in (429, 503) or left <= 0:
        return None
    try:
        wanted = float(response.headers.get("retry-after", 1))
    except ValueError:
        wanted = 1.0
    return min(max(wanted, 0.1), left)


async def refusal(response: Any) -> ChatError:
    """The error for a response that is not a reply: the server's own message, as a ConfigError
    where it refused the request as made (4xx), a ModelBusyError where it is full (429, 503)."""
    body = b""
    async for data in response.aiter_raw():
        body += data
        if len(body) > MAX_LINE_BYTES:
            break
    try:
        answer = json.loads(body)
        message = error_message(answer)
    except ValueError:
        answer, message = None, body[:ERROR_QUOTE].decode(errors="replace") or "(no message)"
    status = response.status_code
    if status == 400 and (context := stated_context(answer, message)):
        return ContextLearnedError(f"The remote server refused the request ({status}): {message}", context)
    if status in (429, 503):
        return ModelBusyError(f"The remote server is busy ({status}), still after {BUSY_WAIT_SECONDS:.0f} s: {message}")
    if response.is_redirect:
        return ChatError(f"The remote server sends requests elsewhere ({status}); redirects are not followed. Load it by the address it names.")
    if 400 <= status < 500:
        return ConfigError(f"The remote server refused the request ({status}): {message}")
    return ChatError(f"The remote server failed ({status}): {message} Try again; if it goes on, ask its operator.")


# How servers say their model's context as they refuse a prompt longer than it: OpenAI's words
# (vLLM's, llama-cpp-python's), SGLang's, llama.cpp's server's (which gives it as a field too), anychat's.
_STATED_CONTEXT = re.compile(r"maximum context length is ([\d,]+) tokens|model's context length \(([\d,]+) tokens\)"
                             r"|available context size \(([\d,]+) tokens\)|model's limit of ([\d,]+) tokens")


def stated_context(answer: Any, message: str) -> int | None:
    """The context length a refusal says the model has, where it says one."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict) and isinstance(error.get("n_ctx"), int) and error["n_ctx"] > 0:
        return error["n_ctx"]
    found = _STATED_CONTEXT.search(message)
    return int(next(group for group in found.groups() if group).replace(",", "")) if found else None


def error_message(body: Any) -> str:
    """The message of OpenAI's error body ({"error": {"message": ...}}), or the body quoted."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return body["detail"]
    return json.dumps(body)[:ERROR_QUOTE]


def token_logprobs(token: dict[str, Any]) -> TokenLogprobs:
    """One token of OpenAI's ``logprobs.content``."""
    return TokenLogprobs(_logprob(token), tuple(_logprob(top) for top in token.get("top_logprobs") or ()))


def _logprob(entry: dict[str, Any]) -> Logprob:
    text = entry.get("token", "")
    raw = entry.get("bytes")
    return Logprob(text, float(entry.get("logprob", 0.0)), tuple(raw) if raw is not None else tuple(text.encode()))
