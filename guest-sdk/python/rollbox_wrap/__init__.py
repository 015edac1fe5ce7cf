"""Wrappers `rollbox build` puts around plain Python functions to make them components: a
reward in a trainer's shape (`reward.py`) or a tool from a typed function (`tool.py`), over
what the sandbox needs of any Python code (`sandbox.py`). Not imported by users."""
