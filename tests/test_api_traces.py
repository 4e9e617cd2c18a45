"""OpenTelemetry traces, against a real server on the default model (llama.cpp and transformers):
the spans the OTLP/HTTP exporter sends to a receiver in the test, read with OpenTelemetry's own
protobuf messages (a request's span, its reply's under it, and the reply's wait, prompt and
writing under that, with the GenAI attributes); and a server left as it is by default, which
never imports opentelemetry, or one told by OTEL_TRACES_EXPORTER alone, which traces."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import openai
import pytest
from fastapi import FastAPI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from api import add_api
from engines.reply_traces import TraceSettings, start_tracer, traces_wanted
from harness.running_server import running_server
from tests.api_samples import QUESTION

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on a free port: every span it was sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), ReceiverHandler)

    def spans_named(self, name: str, within: float = 10.0) -> list:
        deadline = time.monotonic() + within
        while True:
            with self.lock:
                found = [span for span in self.spans if span.name == name]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


class ReceiverHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        exported = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.spans += [span for resource in exported.resource_spans for scope in resource.scope_spans for span in scope.spans]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module", params=["llamacpp", "huggingface"])
def traced(request):
    loaded_models = request.getfixturevalue("loaded_models" if request.param == "huggingface" else "llamacpp_models")
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_address[1]}")
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # spans sent within 50 ms, not the default 5 s
        assert traces_wanted(TraceSettings())
        tracer = start_tracer()
    try:
        with running_server(add_api(FastAPI(), loaded_models, tracer=tracer)) as url:
            yield url, loaded_models.model, receiver
    finally:
        loaded_models.tracer = None  # the session's loaded_models, which other modules use untraced
        receiver.shutdown()


def attributes(span) -> dict:
    def value(any_value):
        kind = any_value.WhichOneof("value")
        if kind == "array_value":
            return [value(each) for each in any_value.array_value.values]
        return getattr(any_value, kind)

    return {each.key: value(each.value) for each in span.attributes}


def children(receiver: Receiver, parent, name: str) -> list:
    return [span for span in receiver.spans_named(name) if span.parent_span_id == parent.span_id and span.trace_id == parent.trace_id]


def test_a_request_and_its_reply_are_spans(traced):
    url, model, receiver = traced
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=300)
    completion = client.chat.completions.create(model=model.model_id, messages=QUESTION, temperature=0, max_tokens=12)
    with anthropic.Anthropic(base_url=url, api_key="-", max_retries=0).messages.stream(
            model=model.model_id, max_tokens=10, messages=QUESTION, extra_body={"temperature": 0}) as stream:
        message = stream.get_final_message()

    for route, finish, tokens_in, cached, tokens_out in (
        ("/v1/chat/completions", completion.choices[0].finish_reason, completion.usage.prompt_tokens,
         completion.usage.prompt_tokens_details.cached_tokens, completion.usage.completion_tokens),
        ("/v1/messages", {"max_tokens": "length", "end_turn": "stop"}[message.stop_reason],
         message.usage.input_tokens + message.usage.cache_read_input_tokens, message.usage.cache_read_input_tokens,
         message.usage.output_tokens),
    ):
        [request] = receiver.spans_named(f"POST {route}")
        assert request.kind == request.SPAN_KIND_SERVER and not request.parent_span_id
        assert attributes(request) | {"http.response.status_code": 200, "http.route": route} == attributes(request)
        [reply] = children(receiver, request, f"chat {model.model_id}")
        assert attributes(reply) == {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model.model_id, "gen_ai.response.model": model.model_id,
            "gen_ai.response.finish_reasons": [finish], "gen_ai.usage.input_tokens": tokens_in,
            "gen_ai.usage.output_tokens": tokens_out, "gen_ai.usage.cache_read.input_tokens": cached, "anychat.backend": model.backend,
        }
        parts = [children(receiver, reply, name) for name in ("queue", "prompt", "generation")]
        assert all(len(part) == 1 for part in parts), parts
        (queue,), (prompt,), (generation,) = parts
        # One after the other, within the reply, within the request.
        assert request.start_time_unix_nano <= reply.start_time_unix_nano == queue.start_time_unix_nano
        assert queue.end_time_unix_nano == prompt.start_time_unix_nano <= prompt.end_time_unix_nano == generation.start_time_unix_nano
        assert generation.end_time_unix_nano == reply.end_time_unix_nano <= request.end_time_unix_nano
        assert generation.end_time_unix_nano > generation.start_time_unix_nano  # the reply's tokens took time to write
        assert attributes(generation) == {"gen_ai.usage.output_tokens": tokens_out}


def test_a_client_s_trace_goes_on_on_the_server(traced):
    url, model, receiver = traced
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0).models.list(
        extra_headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
    [request] = receiver.spans_named("GET /v1/models")
    assert request.trace_id.hex() == trace_id and request.parent_span_id.hex() == span_id


SERVE_ONE_REPLY = """
import json, sys
from fastapi.testclient import TestClient
import app, server
args = app.parse_args(["api", "--backend", "llamacpp"])
loaded_models = server.loaded_models(args)
server.load_model(loaded_models, app.model_settings(args))
with TestClient(server.api_app(loaded_models, args, server.server_logins(None, args)), base_url="http://localhost") as client:
    reply = client.post("/v1/chat/completions", json={"model": loaded_models.model.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert reply.status_code == 200, reply.text
print("imported:", json.dumps(sorted(name for name in sys.modules if name.startswith("opentelemetry"))), flush=True)
loaded_models.unload()
"""


def serve_one_reply(**otel: str) -> str:
    """What `app.py api` prints having served one reply, with ``otel`` and no other OTEL_ variable."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")} | otel
    done = subprocess.run([sys.executable, "-c", SERVE_ONE_REPLY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_traces_are_off_by_default_and_opentelemetry_is_never_imported():
    output = serve_one_reply()
    assert 'imported: []' in output
    assert '"gen_ai.operation.name"' not in output


def test_the_standard_variable_alone_turns_traces_on():
    output = serve_one_reply(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="anychat-test")
    assert '"opentelemetry.sdk.trace"' in output.split("imported:")[1]
    # The console exporter prints each span as JSON when the process ends.
    assert '"name": "POST /v1/chat/completions"' in output and '"gen_ai.operation.name": "chat"' in output
    assert '"service.name": "anychat-test"' in output


def test_an_exporter_this_server_lacks_is_refused_saying_so(monkeypatch):
    assert not traces_wanted(TraceSettings(otel_traces=True), {"OTEL_TRACES_EXPORTER": "none"})
    assert traces_wanted(TraceSettings(otel_traces=True), {})
    assert not traces_wanted(TraceSettings(), {})
    with pytest.raises(ValueError, match="OTLP over HTTP"):
        start_tracer({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(ValueError, match="otlp .* or console"):
        start_tracer({"OTEL_TRACES_EXPORTER": "zipkin"})
    # Without the SDK installed, the error says what to install.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ValueError, match="pip install opentelemetry-sdk==.* opentelemetry-exporter-otlp-proto-http=="):
        start_tracer({})
