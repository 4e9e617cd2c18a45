"""The /v1 routes, serving the models the shared LoadedModels holds (the page may load others), each request the one it names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engines import ChatModel, ChatRequest, LoadedModels, line_user
from engines.context_settings import ContextPolicy
from limits import Limits
from store import ChatStore, StoreError

from . import anthropic_messages, completions, responses, text_completions
from .anthropic_schemas import CountTokensRequest, MessageResponse, MessagesRequest, ModelInfo, ModelInfoList, TokenCount
from .errors import API_PREFIX, APIError
from .model_loads import LoadsPerUser
from .schemas import (ChatCompletion, ChatCompletionRequest, DocumentReport, ModelCard, ModelList, Score, ScoreRequest, ScoreResponse, TokenizeRequest,
                      TokenizeResponse, now)
from .responses_schemas import DeletedResponse, ResponsesRequest
from .text_completion_schemas import Completion, CompletionRequest

T = TypeVar("T")
# nginx's status for a request whose client went away before the answer.
CLIENT_CLOSED_REQUEST = 499


async def while_connected(http: Request, work: Coroutine[Any, Any, T]) -> T | Response:
    """``work``'s result, or, if the client leaves first, ``work`` cancelled (so the model stops,
    also in the middle of evaluating a long prompt, before any reply exists) and an empty 499."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(http))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def requester(http: Request) -> str:
    """Whom a request counts for in the model's waiting line: the login it was made with (which
    the API's login check puts in ``request.state.user``), else the client's address. Never the
    body's ``user`` field, which any client sets to anything."""
    return line_user(getattr(http.state, "user", None), http.client.host if http.client else None)


async def _disconnected(http: Request) -> None:
    # The body is read already, so the next message can only be the client leaving.
    while (await http.receive())["type"] != "http.disconnect":
        pass


def create_router(loaded_models: LoadedModels, local_media_dir: Path | None = None, limits: Limits = Limits(),
                  context_policy: ContextPolicy | None = None, store: ChatStore | None = None) -> APIRouter:
    """``local_media_dir``: the folder whose files content parts may name (none: no local files);
    ``limits``: what a document sent in a ``file`` part may take, and how many models one user's
    requests may load; ``context_policy``: for a chat request that names none (none: refused where
    too long, as OpenAI's API does); ``store``: where documents too long for the context are kept
    to answer from their passages (none: such a request is refused as too long), and the Responses
    API's replies (none: store is taken as false, and previous_response_id finds nothing). Who
    may send requests is checked before they get here (ApiAccessCheck)."""
    router = APIRouter(prefix=API_PREFIX)
    loads = LoadsPerUser(limits.max_model_loads_per_user)

    async def serving(requested: str, http: Request) -> ChatModel:
        """The loaded model a request names, or loaded for it where the server lets requests load
        the models it lists, as many as the user's share (a load is slow: on a worker thread, the
        other requests served meanwhile)."""
        model = loaded_models.for_request(requested)
        if model is None and loaded_models.keep.load_on_demand:  # only then may it load: no worker thread taken otherwise
            user = requester(http)
            model = await asyncio.to_thread(loaded_models.for_request, requested, lambda: loads.take(user))
        if model is not None:
            return model
        served = ", ".join(repr(model.model_id) for model in loaded_models.models) or loaded_models.model.model_id  # none: why none is
        raise APIError(404, f"The model {requested!r} is not served here; this server serves {served} (see GET /v1/models).",
                       param="model", code="model_not_found")

    # On the event loop: a synchronous route takes one of the worker threads the page's handlers
    # share, and a flood of those kept the model list waiting for seconds.
    @router.get("/models", response_model=None)
    async def list_models(http: Request) -> ModelList | ModelInfoList:
        if "anthropic-version" in http.headers:  # Anthropic's SDK sends it with every request
            listed = [ModelInfo(id=model.model_id, display_name=model.display_name) for model in loaded_models.models]
            return ModelInfoList(data=listed, first_id=listed[0].id if listed else None, last_id=listed[-1].id if listed else None)
        loaded = [ModelCard(id=model.model_id, created=now(), input_modalities=["text", *sorted(model.media_kinds)],
                            max_model_len=model.context_length, prompt_cache=model.prompt_cache) for model in loaded_models.models]
        # Those a request may load, after: read from the disk, on a worker thread.
        offered = await asyncio.to_thread(loaded_models.offered) if loaded_models.keep.load_on_demand else {}
        return ModelList(data=[*loaded, *(ModelCard(id=name, created=now(), loaded=False, input_modalities=modalities(listed.reads))
                                          for name, listed in offered.items())])

    async def prepared(body: ChatCompletionRequest, model: ChatModel, http: Request) -> tuple[ChatRequest, list[DocumentReport]] | Response:
        """The engine's request for a chat in either dialect, or the 499 of a client that left
        while its documents were read (reading a whole document is the model's work too)."""
        kept = (store.library, owner_of(http)) if store is not None else None
        return await while_connected(http, completions.chat_request(body, model, local_media_dir, requester(http), limits,
                                                                    context_policy, kept))

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, http: Request) -> ChatCompletion | StreamingResponse | Response:
        model = await serving(body.model, http)
        built = await prepared(body, model, http)
        if isinstance(built, Response):
            return built
        chat, documents = built
        if not body.stream:
            return await while_connected(http, completions.complete(body, model, chat, documents))
        stream = await while_connected(http, completions.start_stream(body, model, chat, documents))
        return _event_stream(stream)

    @router.post("/messages", response_model=None)
    async def messages(body: MessagesRequest, http: Request) -> MessageResponse | StreamingResponse | Response:
        """Anthropic's Messages API, on the same path as a chat completion (api/anthropic_messages.py)."""
        model = await serving(body.model, http)
        chat_body, skipped = anthropic_messages.as_chat_completion(body, model.model_id)
        built = await prepared(chat_body, model, http)
        if isinstance(built, Response):
            return built
        chat, documents = built
        # Anthropic's server tools (web search, code execution) are not run here: the client is told which were left out.
        headers = {"x-anychat-skipped-tools": ", ".join(skipped)} if skipped else {}
        if not body.stream:
            reply = await while_connected(http, anthropic_messages.complete(chat_body, model, chat, documents))
            return reply if isinstance(reply, Response) else JSONResponse(reply.model_dump(), headers=headers)
        stream = await while_connected(http, anthropic_messages.start_stream(chat_body, model, chat))
        return _event_stream(stream, headers)

    @router.post("/responses", response_model=None)
    async def create_response(body: ResponsesRequest, http: Request) -> JSONResponse | StreamingResponse | Response:
        """OpenAI's Responses API, on the same path as a chat completion (api/responses.py)."""
        model = await serving(body.model, http)
        earlier = await asyncio.to_thread(kept_conversation, body.previous_response_id, http) if body.previous_response_id else []
        conversion = responses.as_chat_completion(body, model, earlier)
        built = await prepared(conversion.chat, model, http)
        if isinstance(built, Response):
            return built
        chat, _ = built
        keeping = responses.Keeping(store.responses, owner_of(http)) if store is not None and body.store else None
        if not body.stream:
            reply = await while_connected(http, responses.respond(body, conversion, model, chat, keeping))
            return reply if isinstance(reply, Response) else JSONResponse(reply)
        return _event_stream(await while_connected(http, responses.start_stream(body, conversion, model, chat, keeping)))

    def kept_conversation(response_id: str, http: Request) -> list[dict[str, Any]]:
        if store is None:
            raise APIError(400, "previous_response_id names a kept response, but this server keeps none (it has no chat store).",
                           param="previous_response_id")
        try:
            return store.responses.conversation(owner_of(http), response_id)
        except StoreError as error:
            raise APIError(404, str(error), param="previous_response_id", code="previous_response_not_found") from None

    @router.get("/responses/{response_id}")
    async def read_response(response_id: str, http: Request) -> JSONResponse:
        found = await asyncio.to_thread(store.responses.get, owner_of(http), response_id) if store is not None else None
        if found is None:
            raise APIError(404, f"No response {response_id} is kept here for you.", param="response_id", code="not_found")
        return JSONResponse(found)

    @router.delete("/responses/{response_id}")
    async def delete_response(response_id: str, http: Request) -> DeletedResponse:
        if store is None or not await asyncio.to_thread(store.responses.delete, owner_of(http), response_id):
            raise APIError(404, f"No response {response_id} is kept here for you.", param="response_id", code="not_found")
        return DeletedResponse(id=response_id)

    @router.post("/messages/count_tokens")
    async def count_message_tokens(body: CountTokensRequest, http: Request) -> TokenCount:
        """The prompt's length as this model reads it: its own template and tokenizer, tools included."""
        model = await serving(body.model, http)
        chat_body, _ = anthropic_messages.as_chat_completion(body, model.model_id)
        chat, _ = await completions.chat_request(chat_body, model, local_media_dir, requester(http), limits)
        return TokenCount(input_tokens=await asyncio.to_thread(model.count_prompt_tokens, chat))

    @router.post("/completions", response_model=None)
    async def text_completion(body: CompletionRequest, http: Request) -> Completion | StreamingResponse | Response:
        model = await serving(body.model, http)
        prompts = text_completions.completion_requests(body, requester(http))
        if not body.stream:
            return await while_connected(http, text_completions.complete(body, model, prompts))
        stream = await while_connected(http, text_completions.start_stream(body, model, prompts))
        return _event_stream(stream)

    @router.post("/score")
    async def score(body: ScoreRequest, http: Request) -> ScoreResponse:
        model = await serving(body.model, http)
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise APIError(400, "input must hold at least one text to score.", param="input")
        scores = await model.aget_scores(texts, requester(http))
        return ScoreResponse(model=model.model_id, data=[Score(index=i, score=s) for i, s in enumerate(scores)])

    @router.post("/tokenize")
    async def tokenize(body: TokenizeRequest, http: Request) -> TokenizeResponse:
        model = await serving(body.model, http)
        chat, _ = await completions.chat_request(body.as_chat(), model, local_media_dir, requester(http), limits)
        return TokenizeResponse(count=await asyncio.to_thread(model.count_prompt_tokens, chat), max_model_len=model.context_length)

    @router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    def unknown_endpoint(path: str, http: Request) -> None:
        # Without this, a mistyped /v1 path would reach the page mounted at "/" and get its 404.
        raise APIError(
            404,
            f"There is no {http.method} {API_PREFIX}/{path} here. Endpoints: GET /v1/models, "
            "POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET and DELETE /v1/responses/{id}, "
            "POST /v1/messages, POST /v1/messages/count_tokens, POST /v1/score, POST /v1/tokenize.",
            code="not_found",
        )

    return router


def owner_of(http: Request) -> str:
    """Whose library a request's documents go into, and whose its kept responses are: its login's, the same as that user's in the
    page; else its client address's."""
    login = getattr(http.state, "user", None)
    return f"login:{login}" if login else f"api:{http.client.host if http.client else 'unknown'}"


def modalities(reads: tuple[str, ...] | None) -> list[str] | None:
    """What a model not loaded reads, as input_modalities name it, where its files say."""
    return None if reads is None else ["text", *sorted(kind.removesuffix("s") for kind in reads)]


def _event_stream(body: AsyncIterator[str] | Response, headers: dict[str, str] | None = None) -> StreamingResponse | Response:
    """An SSE body as the response, or the 499 while_connected gave when the client left first."""
    if isinstance(body, Response):
        return body
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})
