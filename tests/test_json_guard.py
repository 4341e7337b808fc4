"""A COCO file's strings, numbers and nesting bounded as it streams (json_guard.py): checked
against sizes measured on the parsed document, whatever chunks the bytes come in, and a file
past a limit stopped in one line, in the launcher's reading and in the pipeline's."""

import io
import json
import random

import object_sets
import pytest

from pipelines import launcher
from pipelines.inputs import coco as coco_reader
from pipelines.inputs import json_guard

from build_commands import build_flags


def _sizes(document):
    """(longest string's escaped bytes, longest number or literal, deepest nesting)."""
    strings, tokens, depth = [0], [0], [0]

    def walk(value, level):
        if isinstance(value, (dict, list)):
            depth[0] = max(depth[0], level + 1)
            items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
            for key, item in items:
                if key is not None:
                    strings.append(len(json.dumps(key)) - 2)
                walk(item, level + 1)
        elif isinstance(value, str):
            strings.append(len(json.dumps(value)) - 2)
        else:
            tokens.append(len(json.dumps(value)))

    walk(document, 0)
    return max(strings), max(tokens), depth[0]


def _random_value(rnd, level=0):
    kind = rnd.random()
    if level > 5 or kind < 0.3:
        text = ''.join(rnd.choice('ab"\\/\n\tx') for _ in range(rnd.randint(0, 40)))
        number = rnd.randint(-(10 ** rnd.randint(0, 15)), 10**15)
        return rnd.choice([number, rnd.random() * 10 ** rnd.randint(-5, 5), True, None, text])
    if kind < 0.65:
        return [_random_value(rnd, level + 1) for _ in range(rnd.randint(0, 4))]
    keys = (''.join(rnd.choice('k"\\') for _ in range(rnd.randint(1, 6))) for _ in range(4))
    return {key: _random_value(rnd, level + 1) for key in keys}


def _read_through(data, chunk):
    guarded = json_guard.Guarded(io.BytesIO(data), 'doc.json')
    while guarded.read(chunk):
        pass


@pytest.mark.parametrize('seed', range(3))
def test_the_guard_passes_a_document_at_its_limits_and_refuses_one_byte_past(monkeypatch, seed):
    rnd = random.Random(seed)
    for trial in range(300):
        document = _random_value(rnd)
        data = json.dumps(document, separators=(',', ':') if trial % 2 else (', ', ': '))
        data = data.encode('utf-8')
        sizes = _sizes(document)
        chunk = rnd.choice([1, 2, 3, 7, 64, 1 << 20])
        monkeypatch.setattr(json_guard, 'BLOCK_BYTES', rnd.choice([1, 5, 1 << 20]))
        names = ('MAX_STRING_BYTES', 'MAX_TOKEN_BYTES', 'MAX_DEPTH')
        for name, size in zip(names, sizes):
            monkeypatch.setattr(json_guard, name, size)
        _read_through(data, chunk)  # at the limits: read whole
        for name, size in zip(names, sizes):
            if size:
                monkeypatch.setattr(json_guard, name, size - 1)
                with pytest.raises(ValueError, match='near byte'):
                    _read_through(data, chunk)
                monkeypatch.setattr(json_guard, name, size)


def test_the_guard_gives_the_bytes_it_reads_unchanged():
    data = json.dumps({'a': ['x\\"y' * 1000, 1.5e300, {'b': [[[]]]}]}).encode() * 3
    guarded = json_guard.Guarded(io.BytesIO(data), 'doc.json')
    pieces = [guarded.read(n) for n in (0, 5, 70_000, 3)]
    assert b''.join(pieces) + guarded.read() == data


def _coco_with(tmp_path, where, value):
    coco = object_sets.write_coco(str(tmp_path), images=4)
    if where == 'image':
        coco['images'][2]['extra'] = value
    else:  # an annotation megabytes past what the launcher reads (its peek at the first ones,
        # and the guard's block after them): the pipeline's reader is the one to meet it
        first = coco['annotations'][0]
        extra = [{**first, 'id': 10_000 + i} for i in range(5 * coco_reader.PEEK)]
        coco['annotations'] += extra
        coco['annotations'][-1]['extra'] = value
    path = tmp_path / 'annotations' / 'instances.json'
    in_order = {key: coco[key] for key in ('images', 'annotations', 'categories')}  # COCO's
    path.write_text(json.dumps(in_order))
    return path


@pytest.mark.parametrize('where', ['image', 'annotation'])
@pytest.mark.parametrize(
    'value, words',
    [
        ('x' * (json_guard.MAX_STRING_BYTES + 1), 'a string of more than'),
        (int('9' * 300), 'a number or literal of more than'),
        (json.loads('[' * 100 + ']' * 100), 'nests deeper than 64'),
    ],
    ids=['string', 'number', 'nesting'],
)
def test_a_coco_file_past_a_limit_stops_the_build_in_one_line(
    tmp_path, caplog, where, value, words
):
    path = _coco_with(tmp_path, where, value)
    flags = build_flags(path, tmp_path / 'out', '--no-analyze', num_shards=1, in_memory=True)
    assert launcher.main(flags) != 0
    # Beam logs a failing step's error too; what a person sees is the build's own line.
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == 'ERROR' and not r.name.startswith('apache_beam')
    ]
    assert len(errors) == 1 and words in errors[0] and 'instances.json' in errors[0], errors
    assert '\n' not in errors[0]
    assert ('ReadAnnotations' in errors[0]) == (where == 'annotation')
    assert not list((tmp_path / 'out').glob('*/*.tfrecord'))
