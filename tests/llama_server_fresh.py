"""llama-cpp-python's OpenAI server (`python -m llama_cpp.server`, same arguments) with every request evaluated
from an empty KV cache.

Why: the stock server keeps the last request's KV cache and evaluates only the part of the next prompt past their
common prefix. That suffix runs in other batch shapes than the whole prompt would, so its logits differ in the
last bits, and a greedy summary can take another token at a near tie: a request's answer then depends on which
request the server handled before it. The tests compare a cell run through injected faults (timeouts,
retries: another order of requests) with a fault-free one, which needs the server's answer to depend on the
request alone, as our client's caching assumes of a real API.
"""

from __future__ import annotations

import llama_cpp.llama as llama
from llama_cpp.server.__main__ import main

_generate = llama.Llama.generate


def _generate_from_scratch(self, tokens, *args, **kwargs):
    self.reset()  # n_tokens = 0: no prefix match, the whole prompt is evaluated
    return _generate(self, tokens, *args, **kwargs)


llama.Llama.generate = _generate_from_scratch

if __name__ == "__main__":
    main()
