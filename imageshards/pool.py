"""Work on a thread pool, in order or as it completes, with bounded memory."""

import collections
import concurrent.futures
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


def bounded_unordered_map(pool, fn, items, window):
    """Like `pool.map` with at most `window` items submitted at once, but yielding each result
    as soon as it is ready: an item that takes long (a read retried after a fault) holds up
    none of the others. The first error is raised as its item completes; the items not yet
    started are then cancelled."""
    items = iter(items)
    pending = {pool.submit(fn, item) for item in itertools.islice(items, window)}
    try:
        while pending:
            done, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                pending.update(pool.submit(fn, item) for item in itertools.islice(items, 1))
                yield future.result()
    finally:
        for future in pending:
            future.cancel()
