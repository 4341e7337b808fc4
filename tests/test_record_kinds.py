"""A new kind of record is one module (tests/kinds_for_tests.py) and what reads its inputs.

The kind adds a float feature, `image/weight`, from each input's annotation. Its inputs are
listed here as an input reader would list them (InputEntry, with the kind's name on the scan);
the build's own steps validate, shuffle, write and finalize them, and dataset.json, verify,
inspect, TFDS and the trainer's parse spec read them back, none of them told of the kind.
"""

import json
import os

import pytest

from imageshards import dataset_json
from imageshards import records
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards_cli import inspect
from imageshards_cli import verify
from pipelines.core.context import BuildContext
from pipelines.core.settings import BuildConfig
from pipelines.inputs import listing as listing_lib
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan
from pipelines.steps import build_pipeline

import images_for_tests as imgs
import kinds_for_tests
from beam_helpers import new_test_pipeline

WEIGHTS = [0.5, 2.0, 1.25, 0.0, None, 3.5, -1.0, 'heavy']  # None: no annotation


@pytest.fixture(name='weighted_build', scope='module')
def fixture_weighted_build(tmp_path_factory):
    """(OUT, {key: weight}) of a build of Weighted records, one input of each of WEIGHTS."""
    root = tmp_path_factory.mktemp('weighted-in')
    entries, expected = [], {}
    for i, weight in enumerate(WEIGHTS):
        key = f'{"ab"[i % 2]}/{i}.jpg'
        path = root / key
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(imgs.jpeg(i, i % 2))
        annotation = None if weight is None else {'weight': weight}
        entries.append(
            InputEntry(i, str(path), key, key[0], size=path.stat().st_size, annotation=annotation)
        )
        expected[key] = weight
    out = tmp_path_factory.mktemp('weighted') / 'out'
    listing_path = str(out.parent / 'listing.jsonl')
    scan = InputScan(str(root), iter(entries), kind=kinds_for_tests.Weighted.name)
    summary = listing_lib.write_listing_file(scan, listing_path, 4, str(root))
    config = BuildConfig(input=str(root), output=str(out), num_shards=2, analyze=False)
    context = BuildContext.create(config, summary, listing_path, str(out))
    with new_test_pipeline() as p:
        build_pipeline(p, context)
    return out, expected


def _records(out):
    build = dataset_json.Build.load(str(out))
    for split in build.splits:
        for path in build.shard_paths(split):
            for _, record in records.shard_records(path, build.shard_format):
                yield record


def test_dataset_json_states_the_kind_its_features_and_every_input(weighted_build):
    out, _ = weighted_build
    dataset = json.loads((out / 'dataset.json').read_text())
    assert dataset['kind'] == 'weighted-for-tests'
    assert dataset['features'] == kinds_for_tests.Weighted().schema
    assert dataset['features'][kinds_for_tests.WEIGHT] == 'float'
    counts = dataset['counts']
    assert counts['inputs'] == len(WEIGHTS) == counts['written'] + counts['rejected']
    assert counts['rejected_by_reason'] == {'bad_annotation': 2}
    rejected = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
    details = sorted(r['detail'] for r in rejected)
    assert 'finite number of at least 0' in details[1] and 'no number "weight"' in details[0]
    assert isinstance(kinds.of_build(dataset), kinds_for_tests.Weighted)


def test_records_hold_each_inputs_weight(weighted_build):
    out, expected = weighted_build
    found = {}
    for record in _records(out):
        values = records.example_values(records.parse_example(record))
        name = values[features.FILENAME][1][0].decode()
        assert values[kinds_for_tests.WEIGHT][0] == 'float'
        found[os.path.relpath(name, out.parent.parent)] = values[kinds_for_tests.WEIGHT][1][0]
    wanted = {
        key: 1.0 if weight is None else weight
        for key, weight in expected.items()
        if weight is None or (isinstance(weight, float) and weight >= 0)
    }
    assert {key.split('/', 1)[1]: w for key, w in found.items()} == wanted


def test_verify_and_inspect_read_the_new_feature(weighted_build, capsys):
    out, _ = weighted_build
    assert verify.verify(str(out)) == 0
    assert inspect.main([str(out), '-n', '1']) == 0
    shown = capsys.readouterr().out
    assert any(
        line.split()[:3] == [kinds_for_tests.WEIGHT, 'float', '1'] for line in shown.splitlines()
    ), shown


def test_the_trainers_parse_spec_and_tfds_read_the_weights(weighted_build, tf):
    out, expected = weighted_build
    kind = dataset_json.Build.load(str(out)).kind
    spec = kind.feature_spec([kinds_for_tests.WEIGHT, features.ID])
    parsed = tf.io.parse_example(list(_records(out)), spec)
    by_id = dict(zip(parsed[features.ID].numpy().tolist(), parsed[kinds_for_tests.WEIGHT].numpy()))
    weights = [1.0 if w is None else w for w in WEIGHTS]
    assert by_id == {i: pytest.approx(weights[i]) for i in by_id}
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    builder = tfds.builder_from_directory(str(out))
    feature = builder.info.features[kinds_for_tests.WEIGHT]
    assert feature.dtype == tf.float32 and 'how much the image counts' in feature.doc.desc
    seen = {
        int(example[features.ID]): float(example[kinds_for_tests.WEIGHT])
        for split in builder.info.splits
        for example in builder.as_dataset(split=split)
    }
    assert seen == {i: pytest.approx(weights[i]) for i in seen} and len(seen) == len(by_id)
