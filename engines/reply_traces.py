"""OpenTelemetry traces of the replies, for operators who turn them on (TraceSettings, or the
standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_TRACES_EXPORTER variables). Off by default, and then
nothing imports opentelemetry: it is an optional install, and a server that does not trace pays
nothing for it.

Each finished streamed reply is a span (``chat MODEL``, after OpenTelemetry's GenAI semantic
conventions: model, tokens in and out, those read from the prompt cache, finish reason) under the
span current where it was asked for (the API request's: api/traces.py), with its wait in line,
the reading of its prompt and its writing as child spans."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import Field

from .backends.base import Response
from .errors import ConfigError
from .settings import Settings

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

INSTALL_HINT = "pip install opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2"


class TraceSettings(Settings):
    kind = "trace"

    otel_traces: bool = Field(False, description="send OpenTelemetry traces of API requests and replies (wait in line, prompt "
                                                 "reading, writing, tokens) over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT "
                                                 "(default http://localhost:4318), or where OTEL_TRACES_EXPORTER says (otlp, "
                                                 "console); on too where either variable is set")


def traces_wanted(settings: TraceSettings, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to trace: the flag, or the standard variables naming an exporter or an endpoint
    (OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true turn them off, as in every SDK)."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return settings.otel_traces or bool(exporter) or bool(endpoint)


def start_tracer(environ: Mapping[str, str] = os.environ) -> Tracer:
    """A tracer whose spans go, in batches, to the exporters OTEL_TRACES_EXPORTER names (otlp
    by default: OTLP over HTTP, where the OTEL_EXPORTER_OTLP_* variables say), or a ConfigError
    that says what to install or change."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ConfigError(f"OpenTelemetry traces are on, and the OpenTelemetry SDK is not installed: {INSTALL_HINT}") from None
    # OTEL_SERVICE_NAME (read by Resource.create) names the service where the operator sets it.
    provider = TracerProvider(resource=Resource.create({} if environ.get("OTEL_SERVICE_NAME") else {"service.name": "anychat"}))
    for name in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(","):
        if name.strip() == "console":
            exporter = ConsoleSpanExporter()
        elif name.strip() == "otlp":
            exporter = _otlp_exporter(environ)
        else:
            raise ConfigError(f"OTEL_TRACES_EXPORTER={name.strip()}: this server sends traces to otlp (OTLP over HTTP) or console.")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider.get_tracer("anychat")


def _otlp_exporter(environ: Mapping[str, str]):
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: this server sends OTLP over HTTP (http/protobuf) only; "
                          "every collector takes it, on port 4318.")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(f"OpenTelemetry traces are on, and the OTLP exporter is not installed: {INSTALL_HINT}") from None
    return OTLPSpanExporter()


def trace_reply(tracer: Tracer, model: str, backend: str, response: Response, asked: float, first: float, done: float) -> None:
    """``response``, finished (by ``model`` on ``backend``), as a span under the current one, with its parts as child spans:
    ``queue`` (from ``asked`` to its place: the prompt's preparation and the wait in line),
    ``prompt`` (to its first token: the prompt read, less what the prompt cache held),
    ``generation`` (to ``done``). Times are time.monotonic()'s; the spans are made once the
    reply is done, as the engine's loop runs it apart from the caller's."""
    from opentelemetry import trace

    to_wall = time.time_ns() - time.monotonic_ns()

    def at(moment: float) -> int:
        return to_wall + int(moment * 1e9)

    admitted = min(max(response.admitted_at or asked, asked), first)
    span = tracer.start_span(f"chat {model}", start_time=at(asked), kind=trace.SpanKind.INTERNAL, attributes={
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.response.model": model,
        "gen_ai.response.finish_reasons": (response.finish_reason,),
        "gen_ai.usage.input_tokens": response.prompt_length,
        "gen_ai.usage.output_tokens": response.response_length,
        "gen_ai.usage.cache_read.input_tokens": response.cached_tokens,
        "anychat.backend": backend,
    })
    parent = trace.set_span_in_context(span)
    for name, start, end, attributes in (
        ("queue", asked, admitted, {}),
        ("prompt", admitted, first, {"gen_ai.usage.input_tokens": response.prompt_length,
                                     "gen_ai.usage.cache_read.input_tokens": response.cached_tokens}),
        ("generation", first, done, {"gen_ai.usage.output_tokens": response.response_length}),
    ):
        tracer.start_span(name, context=parent, start_time=at(start), attributes=attributes).end(end_time=at(end))
    span.end(end_time=at(done))
