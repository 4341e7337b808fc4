"""The build's Beam counters: made by the steps that count, summed by the launcher at the end.

Every counter is in the `imageshards` namespace: `listed`, `validated`, `reencoded`,
`rejected_<reason>`, `duplicates`, `written`, `bytes_written`, `shards_written`. They are for the
build's closing lines; dataset.json holds the counts a reader relies on.
"""

import logging

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

_LOG = logging.getLogger(__name__)

NAMESPACE = 'imageshards'


def counter(name):
    """The counter `name` of the build (create it in a DoFn's `__init__`)."""
    return beam.metrics.Metrics.counter(NAMESPACE, name)


def totals(result):
    """{counter name: value} of a finished pipeline's result; {} where the runner has none."""
    found = {}
    try:
        for item in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))['counters']:
            value = item.committed if item.committed is not None else item.attempted
            found[item.key.metric.name] = found.get(item.key.metric.name, 0) + value
    except Exception:  # pylint: disable=broad-except
        _LOG.warning('the runner reported no metrics; dataset.json has the counts')
    return found
