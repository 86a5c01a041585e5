"""The teaching views: one checkpoint stepped through from the engine's trace, and key routing."""

from __future__ import annotations

import pytest
from explorer.engine import CollectionSource, KeyedProcessFunction, ManualClock, StreamEnvironment, ValueStateDescriptor
from explorer.engine.checkpoint.config import CheckpointingMode
from explorer.keygroups import assign_to_key_group
from widgets import CheckpointStepper, KeyRouting


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("count", int))

    def process_element(self, value, ctx, out):
        self.n.update((self.n.value() or 0) + 1)


def traced_job(tmp_path, mode, unaligned=False):
    """Two source subtasks -> keyed count (2 subtasks, 2 inputs each); a checkpoint after 120 records."""
    env = StreamEnvironment(parallelism=2, max_parallelism=16, clock=ManualClock(0), trace=True, batch_size=8,
                            channel_capacity=2)
    env.enable_checkpointing(tmp_path / f"chk-{mode.name}-{unaligned}", interval_records=10**9, mode=mode,
                             unaligned=unaligned)
    words = [f"user-{i % 7}" if i % 3 else "hot" for i in range(400)]
    env.from_source(CollectionSource(words, num_splits=2), name="words", parallelism=2) \
        .key_by(lambda w: w).process(Count(), name="count")
    client = env.execute_async("demo")
    client.run(until=lambda rt: sum(s.operator.records_in for s in rt.subtasks if s.is_source) >= 120)
    client.trigger_checkpoint()
    client.run()
    client.close()
    return client


def statuses(stepper):
    return [set(s.channels.values()) for s in stepper.steps]


def test_exactly_once_blocks_and_buffers_while_aligning(tmp_path):
    view = CheckpointStepper(traced_job(tmp_path, CheckpointingMode.EXACTLY_ONCE))
    try:
        steps = view.steps
        assert steps[0].kind == "checkpoint_triggered" and steps[-1].kind == "checkpoint_completed"
        assert set(steps[-1].nodes.values()) == {"snapshotted"}
        blocked = [s for s in steps if "blocked" in s.channels.values()]
        assert blocked and any(s.behind_barrier for s in blocked)
        assert any("aligning" in s.nodes.values() for s in steps)
        assert not any("not blocked" in st for st in statuses(view))
        # the figure follows the step: the blocked channel is drawn thick orange with its buffered count
        first = next(s for s in blocked if s.behind_barrier)
        view.slider.value = first.index + 1  # the slider counts from 1
        widths = [tr.line.width for tr in view.graph.data[:len(view.channels)]]
        assert 5 in widths
        assert any("buffered" in a.text for a in view.graph.layout.annotations)
        assert any("<b>blocks</b>" in s.caption for s in steps)
        # issue 30: print(step.text) shows words, not markup
        blocker = next(s for s in steps if "<b>blocks</b>" in s.caption)
        assert "<" not in blocker.text and " blocks " in blocker.text, blocker.text
    finally:
        view.close()


def test_at_least_once_never_blocks(tmp_path):
    view = CheckpointStepper(traced_job(tmp_path, CheckpointingMode.AT_LEAST_ONCE))
    try:
        sts = statuses(view)
        assert any("not blocked" in s for s in sts) and not any("blocked" in s for s in sts)
    finally:
        view.close()


def test_unaligned_snapshots_at_the_first_barrier(tmp_path):
    view = CheckpointStepper(traced_job(tmp_path, CheckpointingMode.EXACTLY_ONCE, unaligned=True))
    try:
        assert view.mode == "unaligned"
        assert not any("aligning" in s.nodes.values() for s in view.steps)
        assert "in-flight" in " ".join(s.caption for s in view.steps)
        # issue 18: unaligned checkpoints never align, and no caption may say they do
        assert not any("aligned." in s.caption for s in view.steps), [s.caption for s in view.steps]
    finally:
        view.close()


def test_next_and_previous_buttons_move_one_step(tmp_path):
    view = CheckpointStepper(traced_job(tmp_path, CheckpointingMode.EXACTLY_ONCE))
    try:
        assert view.step == 0 and view.prev_button.disabled
        title0 = view.graph.layout.title.text
        view.next_button.click()
        view.next_button.click()
        # the slider and the title number steps alike, from 1 (issue 18: "5" beside "step 6 of 22")
        assert view.step == 2 and view.slider.value == 3 and view.graph.layout.title.text != title0
        assert "step 3 of" in view.graph.layout.title.text
        view.prev_button.click()
        assert view.step == 1 and view.slider.value == 2
        view.slider.value = len(view.steps)
        assert view.step == len(view.steps) - 1 and f"step {len(view.steps)} of {len(view.steps)}" in \
            view.graph.layout.title.text
        assert view.next_button.disabled and "complete" in view.caption.value
    finally:
        view.close()


def test_a_job_without_trace_or_checkpoint_is_refused(tmp_path):
    env = StreamEnvironment(parallelism=1, clock=ManualClock(0))
    env.from_collection(["a"]).key_by(lambda w: w).process(Count(), name="count")
    with pytest.raises(ValueError, match="trace=True"):
        CheckpointStepper(env.execute("x"))


def test_key_routing_follows_the_parallelism():
    view = KeyRouting(keys=["alice", "bob", "carol"], max_parallelism=16, parallelism=2)
    try:
        assert view.get_state()["_model_module"] == "@jupyter-widgets/controls"  # no trait shadows the widget's own
        kgs = [assign_to_key_group(k, 16) for k in ["alice", "bob", "carol"]]
        assert view.result["key_group"].tolist() == kgs
        view.slider.value = 4
        assert view.result["subtask"].tolist() == [kg * 4 // 16 for kg in kgs]
        assert "4 subtasks" in " ".join(a.text for a in view.figure.layout.annotations)
        view.max_select.value = 4
        assert view.parallelism == 4 and view.slider.max == 4
        assert view.result["key_group"].tolist() == [assign_to_key_group(k, 4) for k in ["alice", "bob", "carol"]]
        view.keys_text.value = "x, y"
        assert view.result["key"].tolist() == ["x", "y"]
        with pytest.raises(Exception, match="parallelism"):
            view.parallelism = 5
    finally:
        view.close()
