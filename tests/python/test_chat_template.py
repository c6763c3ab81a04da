"""Our Jinja interpreter against Python jinja2, configured as HF's apply_chat_template configures it
(trim_blocks, lstrip_blocks, loop controls, raise_exception, a json.dumps tojson), on real templates."""
import json
import os
import pathlib
import subprocess

import pytest

TEMPLATES = sorted((pathlib.Path(__file__).resolve().parents[1] / "data" / "chat_templates").glob("*.jinja"))

# The official templates of the families cachet's architectures run (docs/architectures.md), from llama.cpp's
# models/templates inside the llama-cpp-python sdist (scripts/setup_oracles.sh unpacks it; used, not committed).
LLAMACPP_TEMPLATES = pathlib.Path(os.environ.get("CACHET_LLAMACPP_SRC", pathlib.Path.home() / ".cache" / "cachet" /
                                                 "llama.cpp" / "src-0.3.36")) / "vendor" / "llama.cpp" / "models" / "templates"
FAMILY_TEMPLATES = ["Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct", "Qwen-QwQ-32B", "google-gemma-2-2b-it",
                    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
                    "meta-llama-Llama-3.3-70B-Instruct", "microsoft-Phi-3.5-mini-instruct",
                    "mistralai-Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
                    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "HuggingFaceTB-SmolLM3-3B", "LFM2-8B-A1B",
                    "LFM2.5-8B-A1B", "LFM2.5-Instruct", "openai-gpt-oss-120b", "google-gemma-4-31B-it",
                    "google-gemma-4-31B-it-interleaved", "ibm-granite-granite-3.3-2B-Instruct",
                    "ibm-granite-granite-4.0", "ibm-granite-granite-4.1", "NVIDIA-Nemotron-Nano-v2",
                    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "deepseek-ai-DeepSeek-V3.1", "llama-cpp-deepseek-r1",
                    "GLM-4.7-Flash", "GLM-4.6", "moonshotai-Kimi-K2", "Kimi-K2-Instruct", "Kimi-K2-Thinking"]

# Templates also rendered with TOOLS offered.
TOOL_TEMPLATES = ("qwen2", "features", "openai-gpt-oss-120b", "google-gemma-4-31B-it", "ibm-granite-granite-4.0",
                  "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "deepseek-ai-DeepSeek-V3.1", "GLM-4.7-Flash",
                  "moonshotai-Kimi-K2", "Kimi-K2-Thinking")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "  padded with spaces \n\n"}, {"role": "assistant", "content": "\tTabbed answer  "}],
    [{"role": "user", "content": "Unicode: café, 日本語, 🦙, \"quotes\" and 'apostrophes'"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "Line one\nLine two\n\nLine four"}, {"role": "assistant", "content": "OK"},
     {"role": "user", "content": "Again"}, {"role": "assistant", "content": "Sure"},
     {"role": "user", "content": "Last one"}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "units": "C"}}}]},
     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "user", "content": "Thanks"}],
    [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "image"},
                                  {"type": "text", "text": "part two"}]}],
    [{"role": "assistant", "content": "I speak first"}, {"role": "user", "content": "odd order"}],
    [{"role": "system", "content": "Rules."}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}],
    [{"role": "user", "content": "Numbers 1234567 and 3.14 and -2"}],
]


def jinja2_render(src, messages, add_generation_prompt, tools):
    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` (HF's assistant-mask tag): renders its body unchanged, as
        apply_chat_template's AssistantTracker does when no mask is asked for."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: __import__("datetime").datetime.now().strftime(fmt)  # as HF defines it
    kwargs = dict(messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<s>", eos_token="</s>")
    if tools is not None:
        kwargs["tools"] = tools
    try:
        return env.from_string(src).render(**kwargs), None
    except Exception as e:  # noqa: BLE001 - any failure must be a failure for us too
        return None, str(e)


def ours_render(cachet_bin, template, messages, add_generation_prompt, tools, tmp_path):
    mp = tmp_path / "messages.json"
    mp.write_text(json.dumps(messages), encoding="utf-8")
    cmd = [cachet_bin, "template", "--template", str(template), "--messages", str(mp), "--bos", "<s>", "--eos", "</s>"]
    if tools is not None:
        tp = tmp_path / "tools.json"
        tp.write_text(json.dumps(tools), encoding="utf-8")
        cmd += ["--tools", str(tp)]
    if not add_generation_prompt:
        cmd.append("--no-generation-prompt")
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode()
    return r.stdout.decode(), None


@pytest.mark.parametrize("template", TEMPLATES + [LLAMACPP_TEMPLATES / f"{n}.jinja" for n in FAMILY_TEMPLATES],
                         ids=lambda p: p.stem)
def test_rendering_matches_jinja2(cachet_bin, template, tmp_path):
    assert template.exists(), f"{template} is missing (bash scripts/setup_oracles.sh unpacks it)"
    src = template.read_text(encoding="utf-8")
    compared = rendered = 0
    for i, conv in enumerate(CONVERSATIONS):
        for gen in (True, False):
            for tools in ((None, TOOLS) if template.stem in TOOL_TEMPLATES else (None,)):
                want, want_err = jinja2_render(src, conv, gen, tools)
                got, got_err = ours_render(cachet_bin, template, conv, gen, tools, tmp_path)
                where = f"{template.stem} conversation {i} gen={gen} tools={tools is not None}"
                if want_err is not None:
                    assert got_err is not None, f"{where}: jinja2 failed ({want_err}) but we rendered {got!r}"
                    continue
                assert got_err is None, f"{where}: we failed: {got_err}"
                assert got == want, f"{where}:\n--- ours ---\n{got!r}\n--- jinja2 ---\n{want!r}"
                compared += 1
                rendered += 1
    assert rendered >= 12, f"only {rendered} successful renders for {template.stem}"


def test_unsupported_construct_is_a_clear_error(cachet_bin, tmp_path):
    cases = [("{% include 'x' %}", "unsupported tag"), ("{{ x | frobnicate }}", "unsupported filter 'frobnicate'"),
             ("{% if x %}", "missing {% endif %}"), ("{{ 'a' ", "missing '}}'"),
             ("{{ raise_exception('bad role') }}", "bad role"), ("{{ x is frob }}", "unsupported test 'frob'")]
    for src, phrase in cases:
        t = tmp_path / "t.jinja"
        t.write_text(src)
        got, err = ours_render(cachet_bin, t, [{"role": "user", "content": "x"}], True, None, tmp_path)
        assert got is None and phrase in err, (src, err)
