"""The model's tokenizer and chat template, run by the host (Hugging Face `tokenizers` and
`transformers`' template semantics): the subset of `PreTrainedTokenizerFast` workflows use."""

from __future__ import annotations

import json

from wit_world.imports import tokenizer as _wit

from .api import token_ids
from .errors import call


class Tokenizer:
    """`tokenizer.encode`, `decode`, `apply_chat_template` and the special token ids."""

    def __init__(self):
        self._special = None

    def _ids(self):
        if self._special is None:
            self._special = _wit.special_tokens()
        return self._special

    @property
    def eos_token_id(self) -> int | None:
        return self._ids().eos

    @property
    def pad_token_id(self) -> int | None:
        return self._ids().pad

    @property
    def bos_token_id(self) -> int | None:
        return self._ids().bos

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(call(_wit.encode, str(text), bool(add_special_tokens)))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return call(_wit.decode, token_ids(ids), bool(skip_special_tokens))

    def apply_chat_template(
        self,
        conversation,
        tools=None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs,
    ):
        """Render `conversation` (a list of `{"role", "content"}` dicts) with the model's chat
        template; token ids when `tokenize` (the default), else the text. Extra keyword
        arguments (`enable_thinking=False`, ...) reach the template as in `transformers`."""
        kwargs.pop("return_dict", None)
        options = _wit.ChatOptions(
            add_generation_prompt=bool(add_generation_prompt),
            tools=None if tools is None else json.dumps(tools),
            extra=json.dumps(kwargs) if kwargs else None,
        )
        messages = json.dumps(conversation)
        if tokenize:
            return list(call(_wit.apply_chat_template, messages, options))
        return call(_wit.render_chat_template, messages, options)

    def __call__(self, text: str, add_special_tokens: bool = True):
        return {"input_ids": self.encode(text, add_special_tokens)}


tokenizer = Tokenizer()
"""The tokenizer of the model being served."""


def apply_chat_template(tokenizer, messages, tokenize=True, add_generation_prompt=False, **kwargs):
    """AReaL's `areal.utils.hf_utils.apply_chat_template(tokenizer, messages, ...)`."""
    return tokenizer.apply_chat_template(
        messages, tokenize=tokenize, add_generation_prompt=add_generation_prompt, **kwargs
    )
