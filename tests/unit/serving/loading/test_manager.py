"""Serving's Manager: which version to load next, from state alone."""

from serving.loading.manager import MAX_RETRY_S, Backoff, Idle, Load, LoadState, failed, loaded, next_action


def test_nothing_to_do_without_a_target_and_waiting_while_nothing_serves():
    assert next_action(LoadState(), None, 0.0) == Idle(waiting=True)
    assert next_action(LoadState(serving=3), None, 0.0) == Idle(waiting=False)
    assert next_action(LoadState(serving=3), 3, 0.0) == Idle()


def test_a_new_target_is_loaded_whether_newer_or_older():
    assert next_action(LoadState(serving=3), 4, 0.0) == Load(4)
    assert next_action(LoadState(serving=4), 3, 0.0) == Load(3)  # a rollback is a load like any other


def test_a_failed_version_backs_off_doubling_up_to_a_minute_and_loads_again_after():
    state = LoadState(serving=3)
    assert failed(state, 4, 0, now=100.0, poll_s=0.5) == 1.0
    assert next_action(state, 4, 100.5) == Backoff(4, 101.0)
    assert next_action(state, 4, 101.0) == Load(4, failures=1)
    assert failed(state, 4, 1, now=101.0, poll_s=0.5) == 2.0
    assert failed(state, 4, 20, now=0.0, poll_s=0.5) == MAX_RETRY_S
    assert next_action(state, 5, 0.0) == Load(5)  # another target is not held back by 4's failures
    loaded(state, 4)
    assert state.serving == 4 and 4 not in state.failed
    assert next_action(state, 4, 0.0) == Idle()
