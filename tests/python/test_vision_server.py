"""Images through the server's APIs (a synthetic Gemma 3 with its projector, the Gemma chat template): OpenAI
chat completions with image_url data: URIs through the official client, streamed and not; the same picture
sent again resumes from the prefix cache and answers exactly as a server without the cache; Anthropic image
blocks; hostile images each a 400 naming the problem, the server still serving after them."""
import base64
import io
import pathlib

import anthropic
import numpy as np
import openai
import pytest
from PIL import Image

from test_server import Server
from test_vision import random_image, synth_pair

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
GREEDY = {"temperature": 0}


def data_uri(rgb, fmt="PNG"):
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format=fmt)
    mime = "image/png" if fmt == "PNG" else "image/jpeg"
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode()


def question(uri, text="What is in this picture? Answer in one word."):
    return [{"role": "user", "content": [{"type": "text", "text": "Look: "},
                                         {"type": "image_url", "image_url": {"url": uri}},
                                         {"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def pair(cachet_bin, tmp_path_factory):
    return synth_pair(cachet_bin, tmp_path_factory.mktemp("vision_server"), "F16")


def start(cachet_bin, pair, *extra):
    lm, mm = pair
    return Server(cachet_bin, lm, "--chat-template-file", str(DATA / "chat_templates" / "gemma.jinja"),
                  "--mmproj", str(mm), "--kv-memory", "64MiB", "--alias", "m", *extra)


@pytest.fixture(scope="module")
def server(cachet_bin, pair):
    s = start(cachet_bin, pair)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(server):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x", max_retries=0)
    yield c
    c.close()  # before the server's drain, which an idle keep-alive connection would hold


def ask(client, messages, **kw):
    return client.chat.completions.create(model="m", messages=messages, max_tokens=12, logprobs=True,
                                          top_logprobs=5, extra_body=GREEDY, **kw)


def ids_of(resp):
    return [t.token for t in resp.choices[0].logprobs.content]


def test_same_picture_reuses_the_cache_and_answers_as_without_it(cachet_bin, pair, oai):
    a, b = data_uri(random_image(80, 120, 1)), data_uri(random_image(96, 64, 2), "JPEG")
    # A long question after the picture, so whole blocks past it are cached.
    long_q = "Describe it. " * 12
    first = ask(oai, question(a, long_q))
    assert first.usage.prompt_tokens > 16 and first.usage.prompt_tokens_details.cached_tokens == 0
    again = ask(oai, question(a, long_q))
    cached = again.usage.prompt_tokens_details.cached_tokens
    other = ask(oai, question(b, long_q))
    # Another picture shares only the text before it; the same one is reused past its 16 rows.
    shared = other.usage.prompt_tokens_details.cached_tokens
    assert cached >= shared + 16 and cached > first.usage.prompt_tokens // 2, (cached, shared)
    off = start(cachet_bin, pair, "--no-prefix-cache")
    try:
        plain = openai.OpenAI(base_url=f"http://127.0.0.1:{off.port}/v1", api_key="x", max_retries=0)
        want_a = ask(plain, question(a, long_q))
        want_b = ask(plain, question(b, long_q))
        assert want_a.usage.prompt_tokens_details.cached_tokens == 0
        plain.close()  # an idle keep-alive connection would hold the drain
    finally:
        off.stop()
    assert ids_of(first) == ids_of(again) == ids_of(want_a)
    assert ids_of(other) == ids_of(want_b)
    assert first.choices[0].message.content == want_a.choices[0].message.content
    # The picture is read: another one moves the first token's distribution (its runners-up, where the synthetic
    # model is sure of its first choice).
    top = lambda r: [(t.token, t.logprob) for t in r.choices[0].logprobs.content[0].top_logprobs]  # noqa: E731
    assert top(first) == top(again)
    ta, tb = top(first), top(other)
    assert [t for t, _ in ta] != [t for t, _ in tb] or not np.allclose([l for _, l in ta], [l for _, l in tb],
                                                                       atol=1e-3), (ta, tb)


def test_streamed_equals_whole(oai):
    msgs = question(data_uri(random_image(50, 50, 3)))
    whole = ask(oai, msgs)
    text = "".join(c.choices[0].delta.content or "" for c in
                   oai.chat.completions.create(model="m", messages=msgs, max_tokens=12, stream=True,
                                               extra_body=GREEDY) if c.choices)
    assert text == whole.choices[0].message.content


def test_anthropic_image_block_is_the_same_prompt(server, oai):
    rgb = random_image(70, 90, 4)
    uri = data_uri(rgb)
    claude = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="x", max_retries=0)
    m = claude.messages.create(model="m", max_tokens=12, extra_body=GREEDY, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Look: "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": uri.split(",", 1)[1]}},
        {"type": "text", "text": "What is in this picture? Answer in one word."}]}])
    o = ask(oai, question(uri))
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == o.usage.prompt_tokens
    assert "".join(b.text for b in m.content if b.type == "text") == o.choices[0].message.content.strip()
    assert m.usage.output_tokens == o.usage.completion_tokens
    claude.close()


def test_hostile_images_are_400s(server, oai, tmp_path):
    png = io.BytesIO()
    Image.fromarray(random_image(64, 64, 5)).save(png, format="PNG")
    png = png.getvalue()
    jpg = io.BytesIO()
    Image.fromarray(random_image(64, 64, 5)).save(jpg, format="JPEG")
    jpg = jpg.getvalue()
    huge = bytearray(png)
    huge[16:24] = (200000).to_bytes(4, "big") + (200000).to_bytes(4, "big")
    b64 = lambda b: "data:image/png;base64," + base64.b64encode(b).decode()  # noqa: E731
    cases = {
        "malformed base64": ("data:image/png;base64,@@@not-base64@@@", "base64"),
        "truncated JPEG": (b64(jpg[: len(jpg) // 2]), "image 0"),
        "truncated PNG": (b64(png[:100]), "image 0"),
        "huge": (b64(bytes(huge)), "image 0"),
        "zero-sized": (b64(bytes(huge[:16]) + b"\0" * 8 + bytes(huge[24:])), "image 0"),
        "empty": ("data:image/png;base64,", "empty"),
        "not an image": (b64(b"GIF89a and then nothing"), "image 0"),
        "remote URL": ("https://example.com/cat.png", "data: URI"),
    }
    for name, (uri, says) in cases.items():
        with pytest.raises(openai.BadRequestError) as e:
            ask(oai, question(uri))
        assert e.value.status_code == 400, name
        assert says in e.value.message, f"{name}: {e.value.message}"
    # Markers that do not match the images, and an image in an assistant turn.
    with pytest.raises(openai.BadRequestError) as e:
        ask(oai, [{"role": "user", "content": [{"type": "text", "text": "<__media__> twice"},
                                               {"type": "image_url", "image_url": {"url": b64(png)}}]}])
    assert "image" in e.value.message
    with pytest.raises(openai.BadRequestError):
        ask(oai, [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": b64(png)}}]},
                  {"role": "user", "content": "hi"}])
    assert ask(oai, question(b64(png))).choices[0].message.content is not None  # still serving


def test_a_server_without_a_projector_refuses_images(cachet_bin, pair):
    lm, _ = pair
    s = Server(cachet_bin, lm, "--chat-template-file", str(DATA / "chat_templates" / "gemma.jinja"), "--alias", "m")
    try:
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            ask(c, question(data_uri(random_image(32, 32, 6))))
        assert "--mmproj" in e.value.message
        c.close()
    finally:
        s.stop()


def test_cli_run_with_an_image(cachet_bin, pair, tmp_path):
    import json
    import subprocess
    lm, mm = pair
    img = tmp_path / "x.png"
    Image.fromarray(random_image(40, 40, 7)).save(img)
    out = []
    for _ in range(2):
        r = subprocess.run([cachet_bin, "run", "-m", str(lm), "--mmproj", str(mm), "--image", str(img), "-p",
                            "Look: <__media__> what?", "-n", "6", "--temp", "0", "--format", "json"],
                           capture_output=True, text=True, check=True)
        out.append(json.loads(r.stdout))
    assert out[0]["token_ids"] == out[1]["token_ids"] and len(out[0]["token_ids"]) == 6
    assert out[0]["prompt_tokens"] > 16
    r = subprocess.run([cachet_bin, "run", "-m", str(lm), "--image", str(img), "-p", "x"], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "--mmproj" in r.stderr
    info = json.loads(subprocess.run([cachet_bin, "info", "-m", str(mm), "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    assert info["projector"] == "gemma3" and info["rows_per_image"] == 16 and info["row_width"] == 64


def test_responses_input_image_is_the_same_prompt(oai):
    uri = data_uri(random_image(60, 40, 8))
    r = oai.responses.create(model="m", max_output_tokens=12, temperature=0, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "Look: "}, {"type": "input_image", "image_url": uri},
        {"type": "input_text", "text": "What is in this picture? Answer in one word."}]}])
    o = ask(oai, question(uri))
    assert r.usage.input_tokens == o.usage.prompt_tokens
    assert r.output_text == o.choices[0].message.content


def test_chat_page_sends_a_picture_in_headless_chromium(server, oai, tmp_path):
    """The page at `/` offers an attachment when the model reads images; a picture sent with a question reaches
    the model (the encoder runs) and the reply is the API's for the same content parts."""
    import os
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    img = tmp_path / "page.png"
    Image.fromarray(random_image(48, 64, 9)).save(img)
    before = server.metrics().get("cachet_images_encoded_total", 0)
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,700"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(f"http://127.0.0.1:{server.port}/")
        WebDriverWait(driver, 30).until(lambda d: "m" in d.find_element(By.ID, "model").text)
        assert driver.find_element(By.ID, "attach").is_displayed()
        driver.find_element(By.ID, "image").send_keys(str(img))
        driver.find_element(By.ID, "prompt").send_keys("What is this?")
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='1']"))
        reply = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .body").get_attribute("textContent")
        status = driver.find_element(By.ID, "status").text
        assert driver.find_elements(By.CSS_SELECTOR, ".msg.user img")
        driver.save_screenshot(os.environ.get("CACHET_VISION_SCREENSHOT", str(tmp_path / "chat_image.png")))
    finally:
        driver.quit()
    assert "error" not in status, status
    assert server.metrics()["cachet_images_encoded_total"] == before + 1
    uri = "data:image/png;base64," + base64.b64encode(img.read_bytes()).decode()
    want = oai.chat.completions.create(model="m", max_tokens=256, temperature=0, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "What is this?"}]}])
    assert reply == want.choices[0].message.content
