import time

import pytest

from evotensor.core.timeout import TimeLimitExceeded, call_with_time_limit, can_time_limit


def test_a_slow_call_is_stopped_and_a_fast_one_returns():
    assert can_time_limit()  # pytest runs tests in the main thread
    assert call_with_time_limit(lambda: 42, 1.0) == 42
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded):
        call_with_time_limit(lambda: time.sleep(5), 0.2)
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(ValueError, match="seconds must be positive"):
        call_with_time_limit(lambda: 1, 0)
