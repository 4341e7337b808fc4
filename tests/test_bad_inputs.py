"""The bad-input matrix: every kind of file a build meets, several of each, mixed into a valid tree
and into CSV and JSONL manifests, through real builds.

Each valid input must be written once and decode in TensorFlow to the pixels Pillow shows; each
broken one must be in rejected.jsonl with its specific reason; and the numbers must add up.
"""

import collections
import csv
import hashlib
import io
import json
import os
import random
import typing

import numpy as np
import pytest
from PIL import Image

from imageshards import features
from imageshards import tfrecord
from pipelines import launcher
from pipelines.validation import images

import images_for_tests as imgs
from bad_input_kinds import BROKEN
from bad_input_kinds import EXTRAS
from bad_input_kinds import MAX_PIXELS
from bad_input_kinds import VALID

CLASSES = ('ant', 'bee', 'cat')
INSTANCES = 3  # of each kind


class Expected(typing.NamedTuple):
    kind: str
    data: bytes
    reason: str = ''  # for a broken input
    format: str = ''  # for a valid one
    kept: bool = False

    @property
    def sha256(self):
        stored = self.data if self.kept else images.reencode(self.data)
        return hashlib.sha256(stored).hexdigest()


def _file_name(kind, ext, n):
    """Instance names: plain, with spaces and non-ASCII letters, and in another script."""
    return (f'{kind}_{n}', f'{kind} café №{n}', f'写真 {kind} {n}')[n % 3] + ext


@pytest.fixture(scope='module')
def matrix(tmp_path_factory):
    """The tree `root/<class>/<file>`; returns (root, {relative path: Expected})."""
    root = tmp_path_factory.mktemp('matrix')
    expected = {}
    for path in imgs.write_tree(root, 8, CLASSES):
        kept_as = 'jpeg' if path.suffix == '.jpg' else 'png'
        relative = str(path.relative_to(root))
        expected[relative] = Expected('valid_tree', path.read_bytes(), format=kept_as, kept=True)
    for index, (kind, (ext, make, *outcome)) in enumerate({**VALID, **BROKEN}.items()):
        for n in range(INSTANCES):
            relative = f'{CLASSES[(index + n) % 3]}/{_file_name(kind, ext, n)}'
            data = make(100 * index + n)
            if kind in VALID:
                stored_format, kept = outcome
                expected[relative] = Expected(kind, data, format=stored_format, kept=kept)
            else:
                expected[relative] = Expected(kind, data, reason=outcome[0])
            (root / relative).write_bytes(data)
    for relative, (data, _, _) in EXTRAS.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root, expected


def _manifest_expectations(matrix):
    root, expected = matrix
    expected = dict(expected)
    for relative, (data, _, outcome) in EXTRAS.items():
        if isinstance(outcome, tuple):
            expected[relative] = Expected('listed_extra', data, format=outcome[0], kept=outcome[1])
        else:
            expected[relative] = Expected('listed_extra', data, reason=outcome)
    rows = sorted(expected)
    random.Random(5).shuffle(rows)  # row order is listing order; not the tree's
    return root, expected, [{'path': r, 'label': r.split('/')[0]} for r in rows]


def _write_manifest(root, rows, kind):
    path = root / f'images.{kind}'
    if kind == 'csv':
        with open(path, 'w', newline='', encoding='utf-8') as f:
            writer = csv.DictWriter(f, ['path', 'label'])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text(
            ''.join(json.dumps(row, ensure_ascii=False) + '\n' for row in rows), encoding='utf-8'
        )
    return path


@pytest.fixture(scope='module', params=['tree', 'csv', 'jsonl'])
def built(request, matrix, tmp_path_factory):
    """A real build of the matrix; returns (out, dataset, root, {relative: Expected})."""
    root, expected = matrix
    spec = str(root)
    if request.param != 'tree':
        root, expected, rows = _manifest_expectations(matrix)
        spec = str(_write_manifest(root, rows, request.param))
    out = tmp_path_factory.mktemp(f'matrix-{request.param}') / 'out'
    try:
        dataset = launcher.run(
            [
                '--direct_running_mode=in_memory',
                '--input',
                spec,
                '--output',
                str(out),
                '--num-shards',
                '3',
            ]
        )
    finally:
        if request.param != 'tree':
            os.remove(spec)  # the other builds must not see it
    return out, dataset, root, expected, request.param


def _records(out, dataset):
    from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel

    for split in dataset['splits'].values():
        for shard in split['shards']:
            with open(out / shard['path'], 'rb') as f:
                for record in tfrecord.read_records(f, shard['path']):
                    feature = example_pb2.Example.FromString(record).features.feature
                    yield {
                        key: getattr(value, value.WhichOneof('kind')).value[0]
                        for key, value in feature.items()
                    }


def _rejected(out, root):
    lines = (out / 'rejected.jsonl').read_text(encoding='utf-8').splitlines()
    return {os.path.relpath(row['path'], root): row for row in map(json.loads, lines)}


def test_every_input_is_accounted_for(built):
    out, dataset, _, expected, mode = built
    counts = dataset['counts']
    broken = [e for e in expected.values() if e.reason]
    assert counts['inputs'] == len(expected)
    assert counts['inputs'] == counts['written'] + counts['rejected'] + counts['duplicates']
    assert (counts['written'], counts['rejected']) == (len(expected) - len(broken), len(broken))
    assert counts['rejected_by_reason'] == dict(
        sorted(collections.Counter(e.reason for e in broken).items())
    )
    if mode == 'tree':
        skips = collections.Counter(skip for _, skip, _ in EXTRAS.values())
        assert counts['skipped_by_reason'] == dict(skips)
    assert (out / '_SUCCESS').exists()


def test_each_broken_input_is_rejected_with_its_specific_reason(built):
    out, _, root, expected, _ = built
    rejected = _rejected(out, root)
    assert {path: row['reason'] for path, row in rejected.items()} == {
        path: e.reason for path, e in expected.items() if e.reason
    }
    assert all(row['detail'] for row in rejected.values())


def test_written_sha256_multiset_equals_the_valid_inputs(built):
    out, dataset, _, expected, _ = built
    records = list(_records(out, dataset))
    written = collections.Counter(r[features.SHA256].decode() for r in records)
    assert written == collections.Counter(e.sha256 for e in expected.values() if not e.reason)
    for record in records:
        assert (
            hashlib.sha256(record[features.ENCODED]).hexdigest() == record[features.SHA256].decode()
        )


def test_each_valid_input_decodes_in_tensorflow_to_the_pixels_pillow_shows(built, tf):
    out, dataset, root, expected, _ = built
    seen = set()
    for record in _records(out, dataset):
        relative = os.path.relpath(record[features.FILENAME].decode(), root)
        want = expected[relative]
        assert not want.reason and relative not in seen, relative
        seen.add(relative)
        encoded = record[features.ENCODED]
        assert record[features.FORMAT].decode() == want.format, relative
        if want.format == 'jpeg':
            decoded = tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE')
        else:
            decoded = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        reference = images.decode_rgb(want.data)
        np.testing.assert_array_equal(decoded.numpy(), reference, err_msg=relative)
        assert (record[features.HEIGHT], record[features.WIDTH]) == reference.shape[:2]
        as_stored = tf.io.decode_image(encoded, expand_animations=False)
        assert record[features.CHANNELS] == as_stored.shape[-1], relative
    assert seen == {path for path, e in expected.items() if not e.reason}


@pytest.mark.parametrize('kind', sorted(VALID))
def test_valid_kinds_are_stored_as_planned(kind):
    _, make, stored_format, kept = VALID[kind]
    data = make(7)
    info, stored = images.inspect_image(data, MAX_PIXELS)
    assert (info.format, info.reencoded, stored is None) == (stored_format, not kept, kept)


@pytest.mark.parametrize('kind', sorted(BROKEN))
def test_broken_kinds_get_their_reason_without_a_build(kind):
    _, make, reason = BROKEN[kind]
    with pytest.raises(images.Rejected) as caught:
        images.inspect_image(make(7), MAX_PIXELS)
    assert caught.value.reason == reason, caught.value.detail


# Kinds that Pillow decodes and a build rejects: TensorFlow refuses them (training would fail),
# or they exceed a limit of the build's (a progressive JPEG of 400 scans costs seconds each).
REJECTED_THOUGH_PILLOW_DECODES = {
    'jpeg_cut_just_before_end_marker',
    'png_flipped_byte_in_crc',
    'bomb_jpeg_scans',
}


def _pillow_decodes(data):
    """Whether Pillow decodes every pixel of `data`, within the build's pixel limit."""
    try:
        image = Image.open(io.BytesIO(data), formats=images.SUPPORTED_FORMATS)
        if image.width * image.height > MAX_PIXELS:
            return False
        image.load()
    except Exception:  # pylint: disable=broad-except
        return False
    return True


@pytest.mark.parametrize('kind', sorted({**VALID, **BROKEN}))
def test_validation_agrees_with_a_full_pillow_decode(kind):
    """Whatever validation reads of a file (its structure, or a decode), it keeps exactly what a
    full Pillow decode reads, but for what TensorFlow alone refuses."""
    _, make, *_ = {**VALID, **BROKEN}[kind]
    for index in range(3):
        data = make(100 + index)
        try:
            images.inspect_image(data, MAX_PIXELS)
            kept = True
        except images.Rejected:
            kept = False
        expected = _pillow_decodes(data) and kind not in REJECTED_THOUGH_PILLOW_DECODES
        assert kept == expected, (kind, index)
