"""rollbox.verifiers against the real verifiers 0.4.0: a `vf.Task` whose `@vf.reward` is a
rollbox reward, scored through verifiers' own `Task.score(trace)` (what a rollout and
`vf replay` call), on traces built as verifiers builds them; a reward plugged in by config; a
faulting reward scoring 0 with its fault recorded.

Run in the verifiers venv (scripts/install/verifiers-venv.sh) by scripts/test.sh."""

import asyncio

import verifiers.v1 as vf

import rollbox.verifiers as rv


class MathData(vf.TaskData):
    answer: str


class MathTask(vf.Task[MathData]):
    correct = rv.reward("math", weight=2.0, timeout="5s")


def make_trace(task: vf.Task, reply: str) -> vf.Trace:
    """A finished single-turn rollout, as verifiers' Rollout builds its trace."""
    return vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        nodes=[
            vf.MessageNode(message=vf.UserMessage(content=task.data.prompt)),
            vf.MessageNode(parent=0, message=vf.AssistantMessage(content=reply), sampled=True),
        ],
        is_completed=True,
        ok=True,
    )


def test_task_reward_scores_rollouts():
    task = MathTask(MathData(prompt="What is 8 * 9?", answer="72"))
    right = make_trace(task, "8 * 9 = 72, so the answer is \\boxed{72}.")
    wrong = make_trace(task, "The answer is \\boxed{71}.")

    async def score():
        await asyncio.gather(task.score(right), task.score(wrong))

    asyncio.run(score())
    assert right.rewards["correct"].score == 1.0
    assert right.rewards["correct"].weight == 2.0
    assert right.reward == 2.0
    assert wrong.rewards["correct"].score == 0.0
    assert wrong.reward == 0.0
    assert right.metrics["rollbox/correct/faults"] == 0.0


def test_plugged_by_config():
    config = vf.TaskConfig(
        rewards={"math": vf.RewardFunctionConfig(fn="rollbox.verifiers:math_reward", weight=0.5)}
    )
    task = vf.Task(vf.WireTaskData(prompt="What is 8 * 9?", answer="72"), config=config)
    trace = make_trace(task, "\\boxed{72}")
    asyncio.run(task.score(trace))
    assert trace.rewards["math"].score == 1.0
    assert trace.reward == 0.5


def test_fault_scores_zero():
    class Starved(vf.Task[MathData]):
        correct = rv.reward("math", fuel=1)

    task = Starved(MathData(prompt="What is 8 * 9?", answer="72"))
    trace = make_trace(task, "\\boxed{72}")
    asyncio.run(task.score(trace))
    assert trace.rewards["correct"].score == 0.0
    assert trace.metrics["rollbox/correct/faults"] == 1.0
    assert trace.info["rollbox"]["correct"]["fault"]


def test_completion_text_forms():
    assert rv.completion_text("plain") == "plain"
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "result"},
        {"role": "assistant", "content": [{"type": "text", "text": "\\boxed{72}"}]},
    ]
    assert rv.completion_text(messages) == "\\boxed{72}"
