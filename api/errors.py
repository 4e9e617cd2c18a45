"""Errors with the right status, in the shape of the dialect the path speaks: OpenAI's
({"error": {"message", "type", "param", "code"}}), or under /v1/messages Anthropic's
({"type": "error", "error": {"type", "message"}})."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from engines import ChatError, MemoryBudgetError, ModelBusyError, ModelLoadingError, ModelUnloadedError, UnsupportedError

logger = logging.getLogger(__name__)

API_PREFIX = "/v1"
METRICS_PATH = "/metrics"
ANTHROPIC_PREFIX = f"{API_PREFIX}/messages"
# Anthropic's error types by status (its API's errors page); 529 is its "overloaded", which a
# busy or loading local model is too.
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                         413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
# OpenAI's codes for the HTTP errors Starlette and our middleware raise.
HTTP_ERROR_CODES = {404: "not_found", 413: "request_too_large"}
# How long a client is asked to wait while a model loads, while too many requests wait for it, or
# while busy models fill the memory a model it asked for would take.
RETRY_AFTER_SECONDS = 5


class APIError(Exception):
    """A request the API refuses; ``message`` says what was wrong and what to do."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def anthropic_body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": ANTHROPIC_ERROR_TYPES.get(self.status, "api_error"), "message": self.message}}

    def body_for(self, path: str) -> dict[str, Any]:
        """The body in the shape of the dialect ``path`` speaks."""
        return self.anthropic_body() if speaks_anthropic(path) else self.body()


def speaks_anthropic(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(f"{ANTHROPIC_PREFIX}/")


def refusal(path: str, status: int, message: str, code: str) -> Response:
    """A request refused before any route runs (by a middleware): in OpenAI's error shape under
    /v1, as plain text elsewhere (a browser shows it as it is)."""
    if path.startswith(API_PREFIX):
        return JSONResponse(APIError(status, message, code=code).body_for(path), status_code=status)
    return PlainTextResponse(message, status_code=status)


def from_exception(error: Exception) -> APIError:
    """The APIError to answer with for anything a request raised."""
    if isinstance(error, APIError):
        return error
    for transient, code in ((ModelLoadingError, "model_loading"), (ModelBusyError, "model_busy"), (MemoryBudgetError, "memory_budget_full")):
        if isinstance(error, transient):
            return APIError(503, str(error), type="server_error", code=code, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(error, ModelUnloadedError):
        return APIError(503, str(error), type="server_error", code="model_not_loaded")
    if isinstance(error, UnsupportedError) and error.setting:
        return APIError(400, str(error), param=error.setting, code="unsupported_parameter")
    if isinstance(error, ChatError):
        return APIError(400, str(error))
    logger.exception("Unexpected error while serving an API request", exc_info=error)
    return APIError(500, f"The server failed on this request ({type(error).__name__}); this is a bug, see the server log.", type="server_error")


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    problems, first_param = [], None
    for item in error.errors():
        location = [str(part) for part in item.get("loc", ()) if part != "body"]
        param = ".".join(location) if location and item.get("type") != "json_invalid" else None
        first_param = first_param or param
        if item.get("type") == "json_invalid":
            problems.append(f"the body is not valid JSON ({item.get('ctx', {}).get('error', 'parse error')})")
        elif item.get("type") == "extra_forbidden":
            problems.append(f"unrecognized parameter {param!r}")
        elif item.get("type") == "missing":
            problems.append(f"missing required parameter {param!r}" if param else "the body is missing: send a JSON object")
        else:
            problems.append(f"{param or 'body'}: {item.get('msg')}")
    return "Invalid request: " + "; ".join(problems) + ".", first_param


def install_error_handlers(app: FastAPI) -> None:
    """Errors in each dialect's shape under /v1; other paths (the page) keep FastAPI's own answers."""

    def on_api_path(http: Request) -> bool:
        return http.url.path.startswith(API_PREFIX)

    async def api_error(http: Request, error: Exception) -> JSONResponse:
        refused = from_exception(error)
        return JSONResponse(refused.body_for(http.url.path), status_code=refused.status, headers=refused.headers)

    async def unexpected_error(http: Request, error: Exception) -> Response:
        if not on_api_path(http):  # a failure under the mounted page, which shows its own errors
            return PlainTextResponse("Internal Server Error", status_code=500)
        return await api_error(http, error)

    async def validation_error(http: Request, error: RequestValidationError) -> JSONResponse:
        if not on_api_path(http):
            return await request_validation_exception_handler(http, error)
        message, param = _validation_message(error)
        return JSONResponse(APIError(400, message, param=param).body_for(http.url.path), status_code=400)

    async def http_error(http: Request, error: HTTPException) -> JSONResponse:
        if not on_api_path(http):
            return await http_exception_handler(http, error)
        code = HTTP_ERROR_CODES.get(error.status_code)
        message = f"{http.method} {http.url.path}: {error.detail}."
        return JSONResponse(APIError(error.status_code, message, code=code).body_for(http.url.path), status_code=error.status_code)

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(ChatError, api_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
