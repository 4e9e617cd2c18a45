"""reasoning_effort: honoured through a chat template's thinking switch, refused where the
template has none. The embedded SmolLM2's template has none; the switch is tested on the same
model given a template that has one (as Qwen3's, which reads enable_thinking) or reads
reasoning_effort itself (as gpt-oss's)."""

from __future__ import annotations

import openai
import pytest
from fastapi import FastAPI

from api import add_api
from engines import ChatModel, ConfigError, LoadedModels, UnsupportedError
from harness.running_server import running_server
from tests.api_samples import QUESTION

# SmolLM2's ChatML, with Qwen3's thinking switch: the reply starts inside <think>, unless the
# switch is off, when an empty thought is written for the model.
SWITCH_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}"
)
# gpt-oss's way: the template reads the effort itself.
EFFORT_TEMPLATE = (
    "<|im_start|>system\nReasoning: {{ reasoning_effort | default('medium') }}<|im_end|>\n"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
THOUGHT_SKIPPED = "<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def switch_model():
    with ChatModel({"infer_backend": "llamacpp", "chat_template": SWITCH_TEMPLATE}) as model:
        yield model


@pytest.mark.parametrize(("effort", "thinks"), [("none", False), ("minimal", False), ("low", True), ("medium", True), ("high", True)])
def test_efforts_turn_the_templates_thinking_switch(switch_model, effort, thinks):
    prompt = switch_model.render_prompt(QUESTION, reasoning_effort=effort)
    assert prompt.endswith("<think>\n") if thinks else prompt.endswith(THOUGHT_SKIPPED)


def test_an_effort_that_contradicts_enable_thinking_is_refused(switch_model):
    with pytest.raises(ConfigError, match="reasoning_effort 'none' turns thinking off, but enable_thinking is True"):
        switch_model.chat(QUESTION, reasoning_effort="none", enable_thinking=True)
    assert switch_model.render_prompt(QUESTION, reasoning_effort="high", enable_thinking=True).endswith("<think>\n")


def test_a_template_that_reads_the_effort_gets_it_as_it_is():
    with ChatModel({"infer_backend": "llamacpp", "chat_template": EFFORT_TEMPLATE}) as model:
        assert "Reasoning: medium" in model.render_prompt(QUESTION)
        assert "Reasoning: low" in model.render_prompt(QUESTION, reasoning_effort="low")


def test_a_template_without_a_switch_refuses_it(chat_model):
    with pytest.raises(UnsupportedError, match="no thinking switch") as refused:
        chat_model.chat(QUESTION, reasoning_effort="high")
    assert refused.value.setting == "reasoning_effort"


def test_through_the_api(switch_model, loaded_models):
    with running_server(add_api(FastAPI(), LoadedModels(switch_model))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        model_id = client.models.list().data[0].id
        settings = {"model": model_id, "messages": QUESTION, "temperature": 0, "max_tokens": 16}
        thinking = client.chat.completions.create(**settings, reasoning_effort="high").choices[0].message
        assert thinking.model_extra["reasoning_content"] and not thinking.content
        answering = client.chat.completions.create(**settings, reasoning_effort="none").choices[0].message
        assert answering.content and not answering.model_extra.get("reasoning_content")
        with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
            client.chat.completions.create(**settings, extra_body={"reasoning_effort": "max"})
    with running_server(add_api(FastAPI(), loaded_models)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=loaded_models.model.model_id, messages=QUESTION, reasoning_effort="low")
        assert "no thinking switch" in refused.value.body["message"] and refused.value.body["param"] == "reasoning_effort"


def test_the_pages_thinking_switch_does_something_or_says_why_not(switch_model, chat_model):
    """Issue 65's "only controls that do something": the page's Enable thinking follows the
    loaded model's template, and is greyed with its reason where the template has no switch."""
    from tests.page_input import CONTROLS
    from webui.handlers import ChatHandlers
    from webui.languages import said

    no_thinking_switch = said("chat.no_thinking_switch")

    handlers = ChatHandlers(LoadedModels(chat_model), CONTROLS)
    switchable = handlers.model_defaults(switch_model)["enable_thinking"]
    assert (switchable["value"], switchable["interactive"]) == (True, True) and switchable["info"] != no_thinking_switch
    without = handlers.model_defaults(chat_model)["enable_thinking"]
    assert (without["value"], without["interactive"], without["info"]) == (False, False, no_thinking_switch)


def test_the_responses_api_turns_the_switch_by_its_effort(switch_model):
    """reasoning.effort reaches a template with a switch (no warning); the prompt with the switch
    off holds the empty thought the template writes for it."""
    with running_server(add_api(FastAPI(), LoadedModels(switch_model))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        off, on = (client.responses.create(model=switch_model.model_id, input=QUESTION[0]["content"], max_output_tokens=1,
                                           reasoning={"effort": effort}) for effort in ("none", "high"))
    assert off.model_extra.get("warnings") is None and on.model_extra.get("warnings") is None
    assert off.usage.input_tokens - on.usage.input_tokens == switch_model.count_tokens(THOUGHT_SKIPPED) - switch_model.count_tokens("<think>\n")
