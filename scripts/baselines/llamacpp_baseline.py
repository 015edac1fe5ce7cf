"""llama.cpp baseline for `rollbox-bench engine`: the same 200-token prompt, then 128 greedy
tokens, on the same GGUF file, with llama-cpp-python (built from source, -march=native).

    ~/.cache/rollbox/llamacpp-venv/bin/python scripts/baselines/llamacpp_baseline.py MODEL.gguf THREADS
"""

import sys
import time

import numpy as np
from llama_cpp import Llama

TEXT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
        "May. How many clips did Natalia sell altogether in April and May? ")


def main(model, threads):
    llm = Llama(model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads,
                n_batch=512, verbose=False)
    n_vocab = llm.n_vocab()
    ids = []
    while len(ids) < 200:
        ids += llm.tokenize(TEXT.encode(), add_bos=False, special=False)
    ids = ids[:200]
    # Warm up.
    llm.reset()
    llm.eval(ids[:32])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    for _ in range(127):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
        llm.eval([int(np.argmax(logits))])
    t2 = time.perf_counter()
    print(f"llama.cpp ({threads} threads): prefill {200 / (t1 - t0):.0f} tok/s, "
          f"decode {127 / (t2 - t1):.1f} tok/s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
