"""The guest SDK's old import name, kept for one release: components now `import rollbox_sdk`.

`rollbox` is the trainer package's name (`pip install rollbox`: `rollbox.verl`, `rollbox.Host`);
inside a component the SDK is `rollbox_sdk`. Code written with `import rollbox` still builds:
this module makes `rollbox` and each `rollbox.<module>` the SDK's own, and warns once, while
componentize-py imports the app at build time (never per episode).
"""

import importlib
import sys
import warnings

import rollbox_sdk

for _name in (
    "api", "areal_types", "engine", "errors", "rewards", "stats", "tensor", "tokenizer",
    "trajectory", "workflow",
):
    sys.modules[f"rollbox.{_name}"] = importlib.import_module(f"rollbox_sdk.{_name}")

warnings.warn(
    "`import rollbox` in a component is the guest SDK's old name: write `import rollbox_sdk` "
    "(`rollbox` is the trainer package)",
    DeprecationWarning,
    stacklevel=2,
)

sys.modules[__name__] = rollbox_sdk
