"""When to try a provider call again, and how long to wait first.

The driver cannot see the host's per-call deadline, so retries live inside a budget of their own
(`retry_budget_seconds`, default 60, counted from the first attempt). A retry whose wait would
end past the budget is not made: the call fails naming the last status instead.
"""

from __future__ import annotations

import email.utils
import random
from dataclasses import dataclass

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    budget_seconds: float = 60.0
    max_retries: int = 6
    base_delay: float = 0.5
    max_delay: float = 8.0

    def backoff(self, retry: int) -> float:
        """Exponential back-off with jitter in [0.5, 1] of the step: retry 0 waits ~base_delay."""
        step = min(self.max_delay, self.base_delay * (2**retry))
        return step * (0.5 + random.random() / 2)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """The provider's `retry-after` wins over the back-off when it names a wait."""
        return retry_after if retry_after is not None else self.backoff(retry)


def is_retryable(status: int) -> bool:
    """429 (rate limit), 529 (Anthropic overloaded), 408/409 and the 5xx a proxy or server gives."""
    return status in RETRY_STATUSES or status >= 500


def retry_after_seconds(headers: dict[str, str], now_epoch: float | None = None) -> float | None:
    """`retry-after-ms` (OpenAI), else `retry-after` as seconds or an HTTP date; None if absent."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - now_epoch) if now_epoch is not None else None
