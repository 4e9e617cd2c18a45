"""GET /metrics for operators, in Prometheus' text format, behind the same key and logins as /v1:
the requests the app served by route and status (and how long they took), each loaded model's
waiting line, replies, tokens in (and those found in its prompt cache) and out, the wait for the
first token and the time per token after it (engines/reply_meter.py: every door's replies, the
page's too), its prompt cache where the backend keeps one, the memory each model holds as its backend tells it,
and the process's memory and CPU.

Its own registry per app, not prometheus_client's global one: several apps in one process (the
tests) count apart."""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engines import LoadedModels
from engines.reply_meter import Histogram as MeteredHistogram

from .errors import API_PREFIX, METRICS_PATH


class RequestMetrics:
    """ASGI middleware counting every request by its route (the page's under one name, "page")
    and status, and timing it to its last byte."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter("anychat_requests", "Requests served, by route, method and status", ["route", "method", "status"],
                                registry=registry)
        self.seconds = Histogram("anychat_request_seconds", "Seconds from a request to its response's last byte", ["route", "method"],
                                 registry=registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            route = route_name(scope)
            self.requests.labels(route, scope["method"], str(status)).inc()
            self.seconds.labels(route, scope["method"]).observe(time.monotonic() - started)


def route_name(scope: Scope) -> str:
    """The route's path as declared (/v1/responses/{response_id}), not as asked: one series a route."""
    path = getattr(scope.get("route"), "path", None)
    if path and (path.startswith(API_PREFIX) or path == METRICS_PATH):
        return path
    return "page" if not scope["path"].startswith(API_PREFIX) else "unknown"


class ModelMetrics(Collector):
    """The loaded models' numbers, read from them at each scrape."""

    def __init__(self, loaded_models: LoadedModels) -> None:
        self.loaded_models = loaded_models

    def collect(self) -> Iterator[Metric]:
        labels = ["model"]
        loaded = GaugeMetricFamily("anychat_model_loaded", "A model loaded, by id and backend (1)", labels=["model", "backend"])
        memory = GaugeMetricFamily("anychat_model_memory_bytes", "What the model holds in memory, as its backend tells it "
                                   "(docs/api.md#metrics)", labels=["model", "backend"])
        load_seconds = GaugeMetricFamily("anychat_model_load_seconds", "Seconds the model took to load", labels=labels)
        waiting = GaugeMetricFamily("anychat_waiting_requests", "Replies waiting in the model's line for a place", labels=labels)
        running = GaugeMetricFamily("anychat_running_requests", "Replies the model is writing now", labels=labels)
        replies = CounterMetricFamily("anychat_replies", "Replies finished", labels=labels)
        prompt = CounterMetricFamily("anychat_prompt_tokens", "Prompt tokens of the finished replies", labels=labels)
        cached = CounterMetricFamily("anychat_prompt_cached_tokens", "Prompt tokens found in the prompt cache, not read again", labels=labels)
        written = CounterMetricFamily("anychat_generation_tokens", "Tokens the model wrote", labels=labels)
        first = HistogramMetricFamily("anychat_time_to_first_token_seconds", "Seconds from a request to its reply's first token",
                                      labels=labels)
        per_token = HistogramMetricFamily("anychat_time_per_output_token_seconds", "Seconds per token after the first", labels=labels)
        cache_hits = CounterMetricFamily("anychat_prompt_cache_hits", "Conversations found in the prompt cache", labels=labels)
        cache_bytes = GaugeMetricFamily("anychat_prompt_cache_bytes", "What the prompt cache holds, in memory and on disk",
                                        labels=["model", "where"])
        for model in self.loaded_models.models:
            name = model.model_id
            loaded.add_metric([name, model.backend], 1)
            load_seconds.add_metric([name], model.load_seconds)
            if (held := model.memory_bytes) is not None:
                memory.add_metric([name, model.backend], held)
            waiting.add_metric([name], model.line.waiting)
            running.add_metric([name], model.line.running)
            meter = model.meter
            replies.add_metric([name], meter.replies)
            prompt.add_metric([name], meter.prompt_tokens)
            cached.add_metric([name], meter.cached_tokens)
            written.add_metric([name], meter.reply_tokens)
            _histogram(first, name, meter.first_token)
            _histogram(per_token, name, meter.per_token)
            if cache := model.prompt_cache:
                cache_hits.add_metric([name], cache.get("hits", 0))
                cache_bytes.add_metric([name, "memory"], cache.get("memory_bytes", 0))
                cache_bytes.add_metric([name, "disk"], cache.get("disk_bytes", 0))
        yield from (loaded, memory, load_seconds, waiting, running, replies, prompt, cached, written, first, per_token, cache_hits, cache_bytes)


def _histogram(family: HistogramMetricFamily, model: str, histogram: MeteredHistogram) -> None:
    family.add_metric([model], buckets=histogram.cumulative(), sum_value=histogram.total)


def add_metrics(app: FastAPI, loaded_models: LoadedModels) -> None:
    """Count the app's requests, and serve GET /metrics (whoever may use /v1 may read it: api/auth.py)."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(ModelMetrics(loaded_models))
    app.add_middleware(RequestMetrics, registry=registry)

    @app.get(METRICS_PATH, include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
