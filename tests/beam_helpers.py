"""Running small pipelines in tests on the DirectRunner's FnApiRunner (no Prism download)."""

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
