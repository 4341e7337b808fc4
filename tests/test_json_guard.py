"""A COCO file's strings, numbers and nesting bounded as it streams (json_guard.py): checked
against sizes measured on the parsed document, whatever chunks the bytes come in, and a file
past a limit stopped in one line, in the launcher's reading and in the pipeline's; so is one
that is not JSON, at the byte where the parser stopped."""

import io
import json
import random

import ijson
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
    error = _build_error(path, tmp_path / 'out', caplog)
    assert words in error and 'instances.json' in error
    assert ('ReadAnnotations' in error) == (where == 'annotation')


def _build_error(path, out, caplog):
    """The one line a failed build of `path` says (it writes no records)."""
    flags = build_flags(path, out, '--no-analyze', num_shards=1, in_memory=True)
    assert launcher.main(flags) != 0
    # Beam logs a failing step's error too; what a person sees is the build's own line.
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == 'ERROR' and not r.name.startswith('apache_beam')
    ]
    assert len(errors) == 1 and '\n' not in errors[0], errors
    assert not list(out.glob('*/*.tfrecord'))
    return errors[0]


def test_a_coco_file_invalid_amid_its_annotations_stops_the_build_at_its_byte(tmp_path, caplog):
    """Its start and end are whole, so the launcher's reads pass; the pipeline's reader stops,
    at the byte after the token the parser could not take (here the value of a key without
    its colon)."""
    path = _coco_with(tmp_path, 'annotation', 'mark')
    data = path.read_bytes()
    at = data.index(b'"extra": "mark"')
    path.write_bytes(data[:at] + b'"extra" "mark"' + data[at + len(b'"extra": "mark"') :])
    error = _build_error(path, tmp_path / 'out', caplog)
    assert error.startswith(f'{path} is not valid JSON near byte {at + 14:,}: parse error: ')
    assert 'ReadAnnotations' in error


@pytest.mark.parametrize('chunk', [1, 7, 64, 4096, 1 << 16])
def test_a_syntax_error_is_placed_at_its_byte_whatever_chunks_the_parser_reads(chunk):
    items = [{'id': i, 'name': 'é' * (i % 5), 'values': [i * 1.5] * (i % 7)} for i in range(300)]
    data = json.dumps({'annotations': items}, ensure_ascii=False).encode()  # cut UTF-8 too
    for victim in random.Random(chunk).sample(range(300), 10):
        at = data.index(f'{{"id": {victim},'.encode())
        broken = data[:at] + b'{"id" ' + data[at + len(b'{"id": ') :]
        end_of_value = at + len(b'{"id" ') + len(str(victim))
        assert _syntax_error(broken, chunk).startswith(
            f'doc.json is not valid JSON near byte {end_of_value:,}: parse error: object key'
        )
    assert 'at its end (byte 11): parse error: premature EOF' in _syntax_error(b'{"a": [1, 2')
    # Where the bytes around it are also elsewhere in the chunk, the chunk's bytes are given.
    ones = b'1, ' * 20 + b'1'
    same = b'[[[' + ones + b']], {"b": [' + ones + b']], {"b": [' + ones + b']]]'
    assert f'in bytes 0 to {len(same)}: parse error: after key' in _syntax_error(same)


def _syntax_error(data, chunk=1 << 16):
    guarded = json_guard.Guarded(io.BytesIO(data), 'doc.json')
    with pytest.raises(ijson.JSONError) as error:
        list(ijson.items(guarded, 'annotations.item', buf_size=chunk))
    return guarded.syntax_error(error.value)
