"""cachet: LLM inference on CPUs, from Python.

    import cachet
    llm = cachet.LLM("model.gguf")
    [out] = llm.generate(["The capital of France is"], cachet.SamplingParams(max_tokens=16))
    print(out.text)
    for event in llm.stream("Once upon a time", cachet.SamplingParams(max_tokens=32)):
        print(event.text, end="", flush=True)

The engine is the C++ one (continuous batching, paged KV cache, prefix cache): a list of prompts runs batched,
and outputs are bitwise those of the `cachet` command line for the same settings.
"""
from ._cachet import (  # noqa: F401
    LLM,
    Completion,
    FinishReason,
    OutputEvent,
    SamplingParams,
    Stream,
    TokenInfo,
)

__all__ = ["LLM", "Completion", "FinishReason", "OutputEvent", "SamplingParams", "Stream", "TokenInfo"]
