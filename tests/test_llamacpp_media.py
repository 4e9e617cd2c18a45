"""Images, video frames and audio on the llama.cpp backend, for real: tiny GGUF models of real
multimodal architectures and their projectors, made by llama.cpp's own converter (harness/tiny_gguf.py),
run through our engine and, as the reference, through libmtmd called directly (harness/bare_mtmd.py)."""

from __future__ import annotations

import asyncio
import io
import re
import wave

import numpy as np
import pytest

pytest.importorskip("llama_cpp.mtmd_cpp", reason="llama-cpp-python with libmtmd is not installed (bash scripts/setup.sh builds it)",
                    exc_type=ImportError)

from PIL import Image  # noqa: E402

from engines import ChatModel, MediaError, ModelLoadError  # noqa: E402
from engines.model_files.catalog import find_models  # noqa: E402
from harness.bare_mtmd import BareMtmd  # noqa: E402
from harness.tiny_gguf import build_ggufs  # noqa: E402

# Its fixtures convert tiny multimodal models to GGUF with llama.cpp's converter: 20-40 s in all.
pytestmark = pytest.mark.slow

MARKER = "<__media__>"


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The three tiny GGUF pairs, each in a folder of its own with its projector beside it."""
    root = tmp_path_factory.mktemp("gguf")
    return build_ggufs(["qwen2_vl", "smolvlm", "qwen2_audio"], root)


def picture(color, size=(112, 84)) -> Image.Image:
    image = Image.new("RGB", size, color)
    for x in range(0, size[0], 7):
        image.putpixel((x, x % size[1]), (255 - color[0], 255 - color[1], 255 - color[2]))
    return image


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def wav(seconds=1.0, rate=16_000, pitch=440.0) -> bytes:
    samples = (0.3 * np.sin(2 * np.pi * pitch * np.arange(int(seconds * rate)) / rate) * 32767).astype(np.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(rate), out.writeframes(samples.tobytes())
    return buffer.getvalue()


def bare_reply(pair, text: str, media: list[bytes], tokens: int):
    """libmtmd's own helpers on the prompt text our engine rendered (each placeholder its marker)."""
    with BareMtmd(pair.model, pair.mmproj) as bare:
        return bare.generate(text, media, tokens)


def test_a_projector_beside_the_model_is_found_and_says_what_the_model_reads(pairs):
    for arch, kinds in (("qwen2_vl", {"image", "video"}), ("smolvlm", {"image", "video"}), ("qwen2_audio", {"audio"})):
        with ChatModel({"model_name_or_path": str(pairs[arch].model)}) as model:
            assert model.backend == "llamacpp"
            assert model.engine.projector.path == pairs[arch].mmproj and model.media_kinds == kinds
    found = {entry.value: entry for entry in find_models(pairs["qwen2_vl"].model.parent.parent)}
    assert found[str(pairs["qwen2_vl"].model)].reads == ("images", "video")
    assert found[str(pairs["qwen2_audio"].model)].reads == ("audio",)
    assert not any(value.endswith(".gguf") and "mmproj" in value for value in found), "a projector is half of a model, not one"


@pytest.mark.parametrize("arch", ["qwen2_vl", "smolvlm"])
def test_an_image_gives_the_tokens_and_the_reply_libmtmd_gives(pairs, arch):
    pair, image = pairs[arch], picture((200, 30, 30))
    messages = [{"role": "user", "content": "<image>What is in this picture?"}]
    with ChatModel({"model_name_or_path": str(pair.model)}) as model:
        text = model.render_prompt(messages, images=[image])
        [reply] = model.chat(messages, images=[image], temperature=0, max_new_tokens=8)
        [other] = model.chat(messages, images=[picture((20, 30, 220))], temperature=0, max_new_tokens=8)
    assert text.count(MARKER) == 1
    bare = bare_reply(pair, text, [png(image)], 8)
    assert reply.prompt_length == sum(chunk.n_tokens for chunk in bare.chunks), "the image's tokens, as libmtmd counts them"
    assert reply.response_text == bare.text
    assert other.response_text != reply.response_text, "another picture, another reply"


def test_several_images_and_a_video_as_frames_in_the_templates_positions(pairs):
    pair = pairs["qwen2_vl"]
    red, blue = picture((200, 30, 30)), picture((20, 30, 220), (84, 112))
    frames = [np.asarray(picture((40 * i, 200 - 40 * i, 90))) for i in range(3)]
    messages = [{"role": "user", "content": "Compare <image> with <image>, then watch <video>."}]
    with ChatModel({"model_name_or_path": str(pair.model)}) as model:
        text = model.render_prompt(messages, images=[red, blue], videos=[frames])
        [reply] = model.chat(messages, images=[red, blue], videos=[frames], temperature=0, max_new_tokens=8)
    # The video's marker stands for its three frames, each an image to libmtmd.
    expanded = text.replace(f"watch {MARKER}", f"watch {MARKER * 3}")
    bare = bare_reply(pair, expanded, [png(red), png(blue), *(png(Image.fromarray(frame)) for frame in frames)], 8)
    assert [chunk.kind for chunk in bare.chunks].count("image") == 5
    assert reply.prompt_length == sum(chunk.n_tokens for chunk in bare.chunks)
    assert reply.response_text == bare.text


def test_audio_gives_the_tokens_and_the_reply_libmtmd_gives(pairs):
    pair, clip = pairs["qwen2_audio"], wav()
    messages = [{"role": "user", "content": "<audio>What do you hear?"}]
    with ChatModel({"model_name_or_path": str(pair.model)}) as model:
        text = model.render_prompt(messages, audios=[clip])
        [reply] = model.chat(messages, audios=[clip], temperature=0, max_new_tokens=8)
        with pytest.raises(MediaError, match="does not accept images on the llamacpp backend: its projector .* reads audio only"):
            model.chat([{"role": "user", "content": "<image>?"}], images=[picture((1, 2, 3))])
    bare = bare_reply(pair, text, [clip], 8)
    assert reply.prompt_length == sum(chunk.n_tokens for chunk in bare.chunks)
    assert reply.response_text == bare.text


def test_media_in_a_later_turn_and_the_cache_kept_across_turns(pairs):
    pair = pairs["qwen2_vl"]
    red, blue = picture((200, 30, 30)), picture((20, 30, 220))
    with ChatModel({"model_name_or_path": str(pair.model)}) as model:
        evaluated = model.engine._batcher.evaluated
        first = [{"role": "user", "content": "<image>What is this?"}]
        [one] = model.chat(first, images=[red], temperature=0, max_new_tokens=6)
        assert evaluated["media"] == 1
        later = [*first, {"role": "assistant", "content": one.response_text}, {"role": "user", "content": "And this one? <image>"}]
        tokens_before = evaluated["tokens"]
        [two] = model.chat(later, images=[red, blue], temperature=0, max_new_tokens=6)
        text = model.render_prompt(later, images=[red, blue])
        # The first image stays in the sequence's cache: only the new image is encoded, and
        # only the new turn's text is evaluated.
        assert evaluated["media"] == 2
        assert evaluated["tokens"] - tokens_before < two.prompt_length / 2
    bare = bare_reply(pair, text, [png(red), png(blue)], 6)
    assert two.prompt_length == sum(chunk.n_tokens for chunk in bare.chunks)
    assert two.response_text == bare.text


async def test_a_chat_with_an_image_and_text_chats_decode_together_each_as_alone(pairs):
    pair, image = pairs["qwen2_vl"], picture((90, 160, 30))
    chats = [([{"role": "user", "content": "<image>Describe it."}], {"images": [image]}),
             ([{"role": "user", "content": "Write a poem."}], {}),
             ([{"role": "user", "content": "Count to ten."}], {})]
    with ChatModel({"model_name_or_path": str(pair.model), "max_concurrent": 3}) as model:
        alone = [(await model.achat(messages, temperature=0, max_new_tokens=12, **media))[0].response_text for messages, media in chats]
        together = await asyncio.gather(*(model.achat(messages, temperature=0, max_new_tokens=12, **media) for messages, media in chats))
    assert [reply.response_text for [reply] in together] == alone


def test_media_to_a_text_only_gguf_and_a_projector_of_another_model_are_refused(pairs, tmp_path):
    with ChatModel({"infer_backend": "llamacpp"}) as text_only:
        with pytest.raises(MediaError, match="no projector \\(mmproj\\*.gguf\\) was found beside it"):
            text_only.chat([{"role": "user", "content": "<image>?"}], images=[picture((1, 2, 3))])
    with pytest.raises(ModelLoadError, match="does not fit qwen2_vl.gguf: it makes 64-wide embeddings and the model takes 32"):
        ChatModel({"model_name_or_path": str(pairs["qwen2_vl"].model), "mmproj": str(pairs["smolvlm"].mmproj)})
    with pytest.raises(ModelLoadError, match="is not a multimodal projector"):
        ChatModel({"model_name_or_path": str(pairs["qwen2_vl"].model), "mmproj": str(pairs["smolvlm"].model)})
    # A wrong projector beside a model is refused at load too, with what to do.
    stray = tmp_path / "model.gguf"
    stray.symlink_to(pairs["qwen2_vl"].model)
    (tmp_path / "mmproj-other.gguf").symlink_to(pairs["smolvlm"].mmproj)
    with pytest.raises(ModelLoadError, match="mmproj-other.gguf beside model.gguf is for another model"):
        ChatModel({"model_name_or_path": str(stray)})


def test_an_image_attached_in_the_page_is_answered_on_llamacpp(page, pairs, tmp_path):
    from harness.browser import ask, bot_messages, load_model, open_tab, set_number

    expect = pytest.importorskip("playwright.sync_api").expect
    load_model(page, str(pairs["qwen2_vl"].model), re.compile("Loaded qwen2_vl.* on llamacpp"))
    expect(page.locator("#model-status")).to_contain_text("Reads text, images, videos.")
    set_number(page, "max-new-tokens", 6)
    open_tab(page, "Chat")
    path = tmp_path / "red.png"
    picture((200, 30, 30)).save(path)
    page.locator("#chat-input input[type=file]").set_input_files(str(path))
    expect(page.locator("#chat-input img")).to_have_count(1)
    ask(page, "What is in this picture?")
    expect(page.locator("#chatbot [data-testid=user] img")).to_have_count(1)
    expect(bot_messages(page)).to_have_count(1)
    expect(bot_messages(page).last).not_to_contain_text("could not answer")
    assert bot_messages(page).last.inner_text().strip(), "no reply"
    expect(page.locator("#chatbot .reply-stats").last).to_contain_text("llamacpp")
