"""The smallest Python workflow, for `rollbox-bench sandbox`: given a row with `input_ids` it
asks the engine once for them (and is held there for the RSS figure), else it returns None.

    scripts/guests/build-python-workflow.sh tests/python-workflows/trivial.py target/wasm-guests/python/trivial_py.wasm
    rollbox-bench sandbox --trivial target/wasm-guests/python/trivial_py.wasm \\
        --echo target/wasm-guests/python/trivial_py.wasm
"""

import rollbox_sdk as rollbox
from rollbox_sdk import GenerationHyperparameters, ModelRequest, RolloutWorkflow


class Trivial(RolloutWorkflow):
    def __init__(self, **_):
        pass

    async def arun_episode(self, engine, data):
        if "input_ids" not in data:
            return None
        gconfig = GenerationHyperparameters(max_new_tokens=4)
        req = ModelRequest(input_ids=data["input_ids"], gconfig=gconfig)
        return rollbox.single_turn(await engine.agenerate(req), 0.0)


WitWorld = rollbox.export(Trivial)
