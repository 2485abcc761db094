"""The start-time forecast (engine/forecast.py) and the runtimes it plays with (engine/runtimes.py)."""

from __future__ import annotations

from koordqueue.api.constants import (
    BASIS_ANNOTATION,
    BASIS_BEYOND,
    BASIS_DEFAULT,
    BASIS_HISTORY,
    BASIS_NEVER,
)
from koordqueue.engine.forecast import forecast
from koordqueue.engine.runtimes import (
    HISTORY_KEYS,
    HISTORY_PER_KEY,
    Runtime,
    RuntimeBook,
    name_pattern,
    parse_expected_runtime,
)

from .builders import engine_with, node, quota, settle, unit

DEFAULT = Runtime(600.0, BASIS_DEFAULT)


def _three_in_a_row():  # type: ignore[no-untyped-def]
    """A quota of 4 GPUs: one 4-GPU job running since t=0, two more waiting behind it."""
    engine = engine_with(quota("a", 4, 4))
    engine.set_unit(unit("run", 4, "a", created=0.0))
    assert settle(engine, 0.0) == ["default/run"]
    engine.set_unit(unit("w1", 4, "a", created=1.0))
    engine.set_unit(unit("w2", 4, "a", created=2.0))
    settle(engine, 10.0)
    return engine


def test_units_start_one_after_another_as_the_running_ones_end() -> None:
    engine = _three_in_a_row()
    runtimes = {"default/run": Runtime(100.0, BASIS_ANNOTATION), "default/w1": Runtime(300.0, BASIS_ANNOTATION)}
    out = forecast(engine, 10.0, runtimes, DEFAULT)
    w1, w2 = out.units["default/w1"], out.units["default/w2"]
    assert (w1.start, w1.ahead, w1.basis) == (100.0, 1, BASIS_ANNOTATION)
    assert (w2.start, w2.ahead) == (400.0, 2)  # after w1's 300 s
    # optimistic: halves (run ends at 50, but it is t=10 already: w1 at 50, w2 at 200); pessimistic: doubles
    assert (w1.earliest, w1.latest) == (50.0, 200.0)
    assert (w2.earliest, w2.latest) == (200.0, 800.0)
    assert out.complete


def test_the_engine_itself_is_not_changed() -> None:
    engine = _three_in_a_row()
    before = {key: engine.standing(key) for key in ("default/run", "default/w1", "default/w2")}
    forecast(engine, 10.0, {}, DEFAULT)
    assert {key: engine.standing(key) for key in before} == before
    assert engine.unit("default/w1").admitted_quota is None  # type: ignore[union-attr]


def test_max_exec_time_bounds_the_pessimistic_end_and_the_basis_is_the_weakest_ahead() -> None:
    engine = _three_in_a_row()
    runtimes = {"default/run": Runtime(100.0, BASIS_ANNOTATION, max_seconds=150.0),
                "default/w1": Runtime(300.0, BASIS_HISTORY)}
    out = forecast(engine, 10.0, runtimes, DEFAULT)
    assert out.units["default/w1"].latest == 150.0
    assert out.units["default/w2"].basis == f"{BASIS_ANNOTATION}+{BASIS_HISTORY}"


def test_a_unit_that_never_fits_gets_none_and_a_running_one_past_its_end_ends_now() -> None:
    engine = _three_in_a_row()
    engine.set_unit(unit("huge", 8, "a", created=3.0))
    settle(engine, 20.0)
    out = forecast(engine, 5000.0, {"default/run": Runtime(100.0, BASIS_ANNOTATION)}, DEFAULT)
    assert out.units["default/huge"].start is None and out.units["default/huge"].basis == BASIS_NEVER
    assert out.units["default/w1"].start == 5000.0  # run (due at 100) is taken to end now


def test_the_horizon_bounds_the_play() -> None:
    engine = _three_in_a_row()
    out = forecast(engine, 10.0, {}, Runtime(1000.0, BASIS_DEFAULT), horizon=1500.0)
    assert out.units["default/w1"].start == 1000.0
    assert out.units["default/w2"].start is None and out.units["default/w2"].basis == BASIS_BEYOND
    assert not out.complete


def test_priority_orders_the_forecast_and_nodes_are_given_back_by_jobs_that_end() -> None:
    engine = engine_with(quota("a", 8, 8))
    engine.set_node(node("n1", gpus=8))
    engine.set_unit(unit("run", 8, "a"))
    assert settle(engine, 0.0) == ["default/run"]
    engine.set_node_usage("n1", {"nvidia.com/gpu": 8000})
    engine.set_unit_pods("default/run", {("main", "n1"): 1})
    engine.set_unit(unit("low", 8, "a", priority=0, created=1.0))
    engine.set_unit(unit("high", 8, "a", priority=10, created=2.0))
    settle(engine, 5.0)
    out = forecast(engine, 5.0, {}, Runtime(100.0, BASIS_DEFAULT))
    assert out.units["default/high"].start == 100.0
    assert out.units["default/low"].start == 200.0


def test_expected_runtime_annotation_is_read_and_bad_values_are_refused_with_a_message() -> None:
    assert parse_expected_runtime("90s") == (90.0, None)
    assert parse_expected_runtime("45m") == (2700.0, None)
    assert parse_expected_runtime("2h") == (7200.0, None)
    for bad in ("soon", "-5m", "0", "9999h", "1e309"):
        seconds, why = parse_expected_runtime(bad)
        assert seconds is None and why is not None and "koord-queue/expected-runtime" in why


def test_runtime_book_prefers_annotation_then_history_then_default_and_is_bounded() -> None:
    book = RuntimeBook(default_seconds=3600.0)
    assert book.estimate("a", "train-7f9c2", None, None) == Runtime(3600.0, BASIS_DEFAULT)
    for seconds in (100.0, 300.0, 200.0):
        book.record("a", f"train-{int(seconds)}", seconds)
    assert name_pattern("train-7f9c2") == name_pattern("train-12") == "train"
    assert book.estimate("a", "train-abcde", None, None) == Runtime(200.0, BASIS_HISTORY)
    assert book.estimate("b", "train-abcde", None, None).basis == BASIS_DEFAULT  # per quota
    assert book.estimate("a", "train-1", 50.0, None) == Runtime(50.0, BASIS_ANNOTATION)
    assert book.estimate("a", "x", None, 120.0) == Runtime(120.0, BASIS_DEFAULT, 120.0)  # max-exec-time bounds it
    for i in range(HISTORY_PER_KEY * 2):
        book.record("a", "loop", float(i + 1))
    assert book.history("a", "loop") == float(HISTORY_PER_KEY + HISTORY_PER_KEY // 2 + 1)  # the last 20 only
    for i in range(HISTORY_KEYS + 10):
        book.record(f"q{i}", "job", 10.0)
    assert len(book) == HISTORY_KEYS
