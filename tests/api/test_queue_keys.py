"""A Queue's Koord-Queue keys as the engine takes them (issue 19): max-depth,
wait-for-pods-running and the back-off arguments in queue-args."""

from __future__ import annotations

import pytest

from koordqueue.api import constants as c
from koordqueue.api.objects import parse_queue


def queue(annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "q", "namespace": "ns", "annotations": annotations}, "spec": {}}


def test_the_engine_gets_max_depth_and_wait_for_pods_running() -> None:
    parsed = parse_queue(queue({c.ANNOTATION_MAX_DEPTH: "50", c.ANNOTATION_WAIT_FOR_PODS_RUNNING: "true"}), ())
    assert (parsed.queue.max_depth, parsed.queue.wait_for_pods_running) == (50, True)
    assert (parsed.settings.max_depth, parsed.settings.wait_for_pods_running) == (50, True)
    unset = parse_queue(queue({c.ANNOTATION_MAX_DEPTH: "-1"}), ())
    assert (unset.queue.max_depth, unset.queue.wait_for_pods_running, unset.warnings) == (None, False, ())


@pytest.mark.parametrize(
    ("text", "base", "cap"),
    [
        # As Koord-Queue's controller writes it (yaml.Marshal of a map of strings).
        ('podInitialBackoffSeconds: "1"\npodMaxBackoffSeconds: "20"\n', 1.0, 20.0),
        ("podInitialBackoffSeconds: 5", 5.0, None),  # unquoted: Koord-Queue's YAML reads it as the string "5"
        ('{podMaxBackoffSeconds: "0"}', None, 0.0),
        ('someOtherArg: "x"', None, None),  # the queue implementations' keys: left alone
        ("", None, None),
    ],
)
def test_queue_args_give_the_back_off(text: str, base: float | None, cap: float | None) -> None:
    parsed = parse_queue(queue({c.ANNOTATION_QUEUE_ARGS: text}), ())
    assert (parsed.queue.backoff_base, parsed.queue.backoff_cap, parsed.warnings) == (base, cap, ())


@pytest.mark.parametrize(
    ("text", "warning", "base"),
    [
        ("podInitialBackoffSeconds: [1", "not YAML", None),
        ("- 1\n- 2", "must be a YAML map", None),
        ('podInitialBackoffSeconds: "soon"\npodMaxBackoffSeconds: "9"', "podInitialBackoffSeconds must be a number",
         None),
        ('podInitialBackoffSeconds: "-1"', "podInitialBackoffSeconds must be a number", None),
        ('podInitialBackoffSeconds: "2"\npodMaxBackoffSeconds: .nan', "podMaxBackoffSeconds must be a number", 2.0),
    ],
)
def test_queue_args_that_cannot_be_read_are_said(text: str, warning: str, base: float | None) -> None:
    parsed = parse_queue(queue({c.ANNOTATION_QUEUE_ARGS: text}), ())
    assert len(parsed.warnings) == 1 and warning in parsed.warnings[0], parsed.warnings
    assert c.ANNOTATION_QUEUE_ARGS in parsed.warnings[0]
    assert parsed.queue.backoff_base == base
