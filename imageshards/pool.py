"""Work on a thread pool in order, with bounded memory."""

import collections
import itertools


def bounded_map(pool, fn, items, window):
    """Like `pool.map`, in order, with at most `window` results in memory at once."""
    items = iter(items)
    pending = collections.deque(pool.submit(fn, item) for item in itertools.islice(items, window))
    while pending:
        result = pending.popleft().result()
        for item in itertools.islice(items, 1):
            pending.append(pool.submit(fn, item))
        yield result
