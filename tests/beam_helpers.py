"""Running small pipelines in tests on the DirectRunner's FnApiRunner (no Prism download), and
reading what a build wrote."""

import json
import uuid

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline


def new_test_pipeline():
    return test_pipeline.TestPipeline(runner=FnApiRunner())


def collect(build, tmp_path):
    """Runs `build(pipeline) -> PCollection` and returns its elements (JSON round-tripped)."""
    out = tmp_path / f'collect-{uuid.uuid4().hex}.jsonl'
    with new_test_pipeline() as p:
        _ = (
            build(p)
            | 'ToJson' >> beam.Map(json.dumps)
            | 'Write' >> beam.io.WriteToText(str(out), shard_name_template='')
        )
    return [json.loads(line) for line in out.read_text(encoding='utf-8').splitlines()]


def built(out):
    """(dataset.json but for its `created` time, {shard path: its bytes}) of the build in `out`:
    what two builds of the same inputs and seed must agree on."""
    dataset = json.loads((out / 'dataset.json').read_text())
    dataset.pop('created')
    shards = {
        shard['path']: (out / shard['path']).read_bytes()
        for split in dataset['splits'].values()
        for shard in split['shards']
    }
    return dataset, shards
