"""LogLimiter: a repeating log line is let through once per interval."""

from __future__ import annotations

from kraft.common.ratelimit import LogLimiter


def test_first_call_is_allowed_then_one_per_interval() -> None:
    limiter = LogLimiter(1000)
    assert limiter.allow(5)
    assert not limiter.allow(5)
    assert not limiter.allow(1004)
    assert limiter.allow(1005)
    assert not limiter.allow(2004)
    assert limiter.allow(2005)
