"""Record tokenizer parity fixtures for SmolLM2-135M-Instruct (GGUF) with Hugging Face
transformers, the reference implementation rollbox's host tokenizer must match.

    pip install "transformers<5" gguf tokenizers jinja2
    scripts/fetch-model.sh
    python3 scripts/record_tokenizer_fixtures.py > tests/fixtures/tokenizer/smollm2.json

Notes:
* transformers only loads GGUF tokenizers when torch is importable, although the tokenizer
  conversion does not use it; the check is bypassed below (no torch is installed here).
* transformers 4.57 reads this GGUF's special tokens wrongly (eos = `<|im_start|>`, a bos added
  on encode). The GGUF metadata is the truth (bos `<|im_start|>` 1, eos `<|im_end|>` 2, pad 2,
  `add_bos_token` false): ids are recorded with `add_special_tokens=False`, and the special
  tokens are set from the metadata before the chat template is rendered.
"""

import json
import os
import sys

import transformers.modeling_gguf_pytorch_utils as gguf_utils
from gguf import GGUFReader
from transformers import AutoTokenizer

gguf_utils.is_torch_available = lambda: True

MODEL_DIR = os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello world",
    "hello world",
    " leading space",
    "trailing space ",
    "two  spaces   three    four",
    "tabs\tand\nnewlines\n\n\nmany",
    "   ",
    "",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "1234567890",
    "3.14159 + 2.71828 = 5.85987",
    "-42, 1,000,000 and 1e-9",
    "The answer is \\boxed{\\frac{5}{6}}.",
    "$x^2 + y^2 = z^2$",
    "def f(x):\n    return x ** 2  # square\n",
    "fn main() { println!(\"{}\", 1 + 1); }",
    "<html><body class=\"a\">&amp;</body></html>",
    "naïve café résumé façade",
    "Straße, Größe, Ä Ö Ü",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ",
    "한국어 텍스트",
    "مرحبا بالعالم",
    "שלום עולם",
    "emoji 😀🎉🚀 and 👩‍👩‍👧‍👦 family",
    "🤖",
    "<|im_start|>user\nhi<|im_end|>",
    "text with <|endoftext|> inside",
    "<|im_end|><|im_end|>",
    "almost <|im_start special",
    "URL: https://example.com/path?query=1&b=2#frag",
    "email@example.org, @mention #hashtag",
    "ALL CAPS SHOUTING AND MiXeD CaSe",
    "don't won't it's y'all'd've",
    "a" * 300,
    "\u00a0non-breaking\u2003em space\u200bzero width",
    "€100 ≥ £80 ± ¥5 ∑∫√∞",
    "line1\r\nline2\rline3",
]

CHATS = [
    ("single_turn", [{"role": "user", "content": "What is 2 + 2?"}], {"add_generation_prompt": True}),
    ("single_turn_no_generation_prompt", [{"role": "user", "content": "What is 2 + 2?"}], {"add_generation_prompt": False}),
    (
        "multi_turn",
        [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Add 17 and 25."},
        ],
        {"add_generation_prompt": True},
    ),
    (
        "system_prompt",
        [
            {"role": "system", "content": "You are a careful math tutor. Put the answer in \\boxed{}."},
            {"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in total?"},
        ],
        {"add_generation_prompt": True},
    ),
    (
        "tools",
        [{"role": "user", "content": "What is 12 * 7?"}],
        {
            "add_generation_prompt": True,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "calculator",
                        "description": "Evaluate arithmetic",
                        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
                    },
                }
            ],
        },
    ),
    (
        "extra_kwargs",
        [{"role": "user", "content": "Think, then answer: 3 * 3?"}],
        {"add_generation_prompt": True, "enable_thinking": False},
    ),
    (
        "unicode_content",
        [{"role": "user", "content": "翻译：你好 😀"}, {"role": "assistant", "content": "Hello 😀"}],
        {"add_generation_prompt": False},
    ),
]


def main() -> None:
    path = os.path.join(MODEL_DIR, GGUF)
    meta = GGUFReader(path).fields
    tokens = meta["tokenizer.ggml.tokens"].contents()
    special = {
        "bos": int(meta["tokenizer.ggml.bos_token_id"].contents()),
        "eos": int(meta["tokenizer.ggml.eos_token_id"].contents()),
        "pad": int(meta["tokenizer.ggml.padding_token_id"].contents()),
    }
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF)
    tok.bos_token = tokens[special["bos"]]
    tok.eos_token = tokens[special["eos"]]
    tok.pad_token = tokens[special["pad"]]
    encode = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        encode.append(
            {
                "text": text,
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            }
        )
    chats = []
    for name, messages, kwargs in CHATS:
        text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        chats.append({"name": name, "messages": messages, "kwargs": kwargs, "text": text, "ids": ids})
    out = {
        "source": f"transformers {__import__('transformers').__version__}, gguf metadata of {GGUF}",
        "special": special,
        "encode": encode,
        "chat": chats,
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
