"""AReaL's request and response types, with its field names and defaults: the one Python
source of them. The guest SDK (`guest-sdk/python/rollbox_sdk/`) and the host package
(`python/rollbox/`, as a link to this file) both import it, and a test checks the installed
copies are this file.

`GenerationHyperparameters`, `ModelRequest` and `ModelResponse` mirror
`areal.api.cli_args.GenerationHyperparameters` and `areal.api.io_struct` (1.0.4), so workflow
and trainer code that builds them keeps working. Fields AReaL carries for its own engines
(`tokenizer`, `processor`, `lora_name`, ...) are accepted and not sent to the host. Pure
Python: no import of the component bindings, so it loads in a trainer's process too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GenerationHyperparameters:
    """Sampling settings (AReaL's `GenerationHyperparameters`, same names and defaults)."""

    n_samples: int = 1
    max_new_tokens: int = 16384
    min_new_tokens: int = 0
    max_tokens: int = 32768
    greedy: bool = False
    top_p: float = 1.0
    top_k: int = int(1e8)
    temperature: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stop: list[str] | None = None
    frequency_penalty: float = 0.0
    lora_name: str = "default_lora"
    use_beam_search: bool = False
    # rollbox additions (not in AReaL): a sampling seed, and opting out of the host's default
    # stop ids.
    seed: int | None = None
    exclude_default_stop_ids: bool = False

    def new(self, **kwargs) -> GenerationHyperparameters:
        """A copy with `kwargs` replaced (AReaL's `new`)."""
        names = _GCONFIG_FIELDS
        unknown = sorted(kwargs.keys() - names)
        if unknown:
            raise TypeError(
                f"unknown GenerationHyperparameters field(s) {', '.join(unknown)}; "
                f"the fields are {', '.join(sorted(names))}"
            )
        args = {name: getattr(self, name) for name in names}
        args["stop_token_ids"] = list(args["stop_token_ids"])
        args.update(kwargs)
        return GenerationHyperparameters(**args)

    def new_with_stop_and_pad_token_ids(self, tokenizer) -> GenerationHyperparameters:
        """A copy whose stop ids also hold the tokenizer's pad and eos ids (pad first)."""
        ids = list(self.stop_token_ids)
        for extra in (tokenizer.pad_token_id, tokenizer.eos_token_id):
            if extra is not None and extra not in ids:
                ids.append(extra)
        return self.new(stop_token_ids=ids)

    @classmethod
    def from_config(cls, overrides: dict | None) -> GenerationHyperparameters:
        """The defaults with a workflow config's `gconfig` object applied."""
        if overrides is None:
            return cls()
        if not isinstance(overrides, dict):
            raise TypeError(f"gconfig must be a JSON object, not {overrides!r}")
        return cls().new(**overrides)


_GCONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationHyperparameters))
"""The field names of `GenerationHyperparameters`, in order (`new` copies each)."""


@dataclass
class ModelRequest:
    """One generation request (AReaL's `ModelRequest`): token ids in, one sample out."""

    rid: str = ""
    input_ids: list[int] = field(default_factory=list)
    gconfig: GenerationHyperparameters = field(default_factory=GenerationHyperparameters)
    metadata: dict[str, Any] = field(default_factory=dict)
    tokenizer: Any = None
    processor: Any = None
    image_data: list[str] | None = None
    vision_msg_vllm: list | None = None

    def copy(self) -> ModelRequest:
        return dataclasses.replace(
            self,
            input_ids=list(self.input_ids),
            gconfig=self.gconfig.new(),
            metadata=dict(self.metadata),
        )


@dataclass
class ModelResponse:
    """One generation result (AReaL's `ModelResponse`)."""

    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_versions: list[int] = field(default_factory=list)
    stop_reason: str = "stop"
    latency: float = float("inf")
    ttft: float = float("inf")
    itl: list[float] = field(default_factory=list)
    tokenizer: Any = None
    processor: Any = None

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)
