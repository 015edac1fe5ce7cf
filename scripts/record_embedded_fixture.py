"""Record llama.cpp's greedy continuation of a few prompts on the default model, as the
reference for the embedded engine's parity test (host/engines/tests/embedded.rs).

For each prompt: the prompt ids (llama.cpp's tokenizer, special tokens parsed), the first 16
greedy output ids, and each one's logprob (log-softmax of llama.cpp's logits).

    python3 -m venv ~/.cache/rollbox/llamacpp-venv
    ~/.cache/rollbox/llamacpp-venv/bin/pip install 'llama-cpp-python[server]==0.3.36'
    ~/.cache/rollbox/llamacpp-venv/bin/python scripts/record_embedded_fixture.py
"""

import json
import os

import numpy as np
from llama_cpp import Llama, __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(
    os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models")),
    "SmolLM2-135M-Instruct.Q4_1.gguf",
)
OUT = os.path.join(ROOT, "tests", "fixtures", "engines", "embedded_llamacpp_greedy.json")
PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 12 + 30? Answer with a number.<|im_end|>\n<|im_start|>assistant\n",
    "The capital of France is",
    "<|im_start|>user\nTom has 3 apples and buys 5 more. How many apples does he have?<|im_end|>\n"
    "<|im_start|>assistant\n",
]
STEPS = 16


def main():
    llm = Llama(model_path=MODEL, n_ctx=512, n_threads=2, n_batch=512, verbose=False, logits_all=False)
    n_vocab = llm.n_vocab()
    cases = []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        out, lps = [], []
        for _ in range(STEPS):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).astype(np.float64)
            tok = int(np.argmax(logits))
            m = logits.max()
            lp = float(logits[tok] - m - np.log(np.exp(logits - m).sum()))
            out.append(tok)
            lps.append(lp)
            llm.eval([tok])
        cases.append({"prompt": text, "input_ids": ids, "output_ids": out, "output_logprobs": lps})
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/record_embedded_fixture.py", "llama_cpp_python": __version__,
                   "model": os.path.basename(MODEL), "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
