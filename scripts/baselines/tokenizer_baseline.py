"""transformers baseline for `rollbox-bench tokenizer`: the same 2-message chat through
`apply_chat_template(tokenize=True)` (AReaL's path) and the same encode corpus, on the same GGUF.
Needs `pip install "transformers<5" gguf`. Usage: python3 scripts/baselines/tokenizer_baseline.py [N]"""

import os
import sys
import time

import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer
from transformers.utils import logging

gguf_utils.is_torch_available = lambda: True  # tokenizer conversion does not use torch
logging.set_verbosity_error()

MODEL_DIR = os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models"))


def main(n: int) -> None:
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    corpus = [
        f"Question {i}: Natalia sold clips to {48 + i} of her friends in April, and then she sold half as many clips in May. "
        f"How many clips did Natalia sell altogether in April and May? Let's think step by step: {48 + i} + {(48 + i) // 2} = {48 + i + (48 + i) // 2}."
        for i in range(64)
    ]
    start = time.perf_counter()
    tokens = 0
    for _ in range(max(n // 64, 1)):
        for text in corpus:
            tokens += len(tok.encode(text, add_special_tokens=False))
    encode_s = time.perf_counter() - start
    messages = [
        {"role": "system", "content": "You are a careful math tutor. Put the final answer in \\boxed{}."},
        {"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?"},
    ]
    for _ in range(100):
        tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        times.append(time.perf_counter() - t)
    times.sort()
    print(
        f"transformers {__import__('transformers').__version__}: encode {tokens / encode_s:.0f} tokens/s; "
        f"apply_chat_template(tokenize=True) p50={times[len(times) // 2] * 1e6:.1f} µs p99={times[int(0.99 * (len(times) - 1))] * 1e6:.1f} µs"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
