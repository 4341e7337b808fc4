"""Blocks of image metadata: packing, and keeping them inline or (the local runner) spilled to
files, with the payloads of small images."""

import hashlib

import pytest

from imageshards import storage
from imageshards.file_names import to_bytes as key_bytes
from pipelines.core import blocks
from pipelines.core.blocks import ImageMeta
from pipelines.local import spill


def _meta(i, **changes):
    meta = ImageMeta(
        id=i,
        key=f'class_{i % 3}/{i:08d}.jpg',
        label=i % 3,
        split='',
        format='jpeg',
        height=64 + i,
        width=48,
        channels=3,
        sha256=hashlib.sha256(str(i).encode()).digest(),
        num_bytes=2_000 + i,
        source_sha256=b'',
        source_crc32c=4_000_000_000 - i,
        reencoded=False,
    )
    return meta._replace(**changes)


def test_pack_round_trips_every_field():
    metas = [
        _meta(0),
        _meta(1, split='holdout', format='png', reencoded=True, channels=4),
        _meta(2, source_sha256=bytes(range(32)), reencoded=True, format='png'),
        _meta(3, key='ünïcode/名前 with spaces.jpg', id=2**62, num_bytes=5 * 2**32),
        _meta(4, key='gs://bucket/x/' + 'y' * 2000 + '.jpg', sha256=b'short'),
        _meta(5, levels=(3, -1, 2**31 - 1)),  # label level ids, -1 where missing
        _meta(6, levels=()),
        _meta(7, payload=2**63 - 1, payload_offset=5 * 2**32),  # where its bytes were kept
        _meta(8, original_height=4000, original_width=3000, source_sha256=bytes(32)),  # resized
        _meta(9, label=(1, 4), levels=((1,), ()), original_height=1, original_width=2**32 - 1),
        _meta(10, source='tar\tdata/ü.tar\tcat/1.jpg\t512\t1000'),  # inside a container
        _meta(11, source='s', group='g', phash=0, original_height=3, original_width=4),
        _meta(12, group='patient 7', phash=2**64 - 1),  # issue 32's fields, without a source
        _meta(13, phash=2**64),  # a signature (issue 41): wider than a 64-bit hash
        _meta(14, group='g', phash=(1 << 8832) | 2**64 - 1, annotation=b'boxes'),
    ]
    block = blocks.pack(metas)
    assert blocks.unpack(block) == metas
    assert blocks.unpack(blocks.pack([])) == []
    # Split without unpacking: each image's key bytes, label and packed bytes, which join in
    # any order into the block of the metas in that order.
    split = blocks.split(block)
    assert [(key, label) for key, label, _ in split] == [
        (key_bytes(meta.key), meta.label) for meta in metas
    ]
    assert [packed for _, _, packed in split] == [blocks.pack([meta]) for meta in metas]
    assert blocks.unpack(b''.join(packed for _, _, packed in split[::-1])) == metas[::-1]
    assert blocks.split(b'') == []
    # About a hundred bytes per image: what every shuffle carries instead of Python objects.
    assert len(blocks.pack([_meta(i) for i in range(1000)])) < 120 * 1000


def test_inline_store_passes_blocks_as_they_are(tmp_path):
    store = blocks.BlockStore()
    data = [blocks.pack([_meta(1)]), blocks.pack([_meta(2), _meta(3)])]
    refs = store.put('x', data)
    assert refs == data
    assert store.metas(refs) == [_meta(1), _meta(2), _meta(3)]
    assert not list(tmp_path.iterdir())


def test_spilled_store_writes_one_file_per_put_and_reads_byte_ranges(tmp_path):
    store = spill.SpillingStore(str(tmp_path / 'blocks'))
    first = store.put('validated', [blocks.pack([_meta(1)]), b'', blocks.pack([_meta(2)])])
    second = store.put('placed', [blocks.pack([_meta(3), _meta(4)])])
    files = sorted(path.name for path in (tmp_path / 'blocks').iterdir())
    assert len(files) == 2 and files[0].startswith('placed-') and files[1].startswith('validated-')
    assert [ref[0] for ref in first] == [files[1]] * 3
    size = len(blocks.pack([_meta(1)]))
    assert [ref[1:] for ref in first] == [(0, size), (size, 0), (size, size)]
    assert store.metas([second[0], first[2], first[1], first[0]]) == [
        _meta(3),
        _meta(4),
        _meta(2),
        _meta(1),
    ]
    # An inline block (an empty shard's placeholder) is valid with any store.
    assert store.get(b'') == b'' and store.metas([b'']) == []


def test_a_bundles_puts_go_to_one_file_readable_after_each_put(tmp_path):
    store = spill.SpillingStore(str(tmp_path / 'blocks'))
    puts = store.appender()
    first = puts.put('by-group', [blocks.pack([_meta(1)]), blocks.pack([_meta(2)])])
    assert store.metas(first) == [_meta(1), _meta(2)]  # before the bundle's end
    second = puts.put('by-group', iter([b'', blocks.pack([_meta(3), _meta(4)])]))
    puts.close()
    (only,) = (tmp_path / 'blocks').iterdir()
    assert only.name.startswith('by-group-') and {ref[0] for ref in first + second} == {only.name}
    assert store.metas(second + first) == [_meta(3), _meta(4), _meta(1), _meta(2)]
    assert blocks.BlockStore().appender().put('x', [b'a']) == [b'a']  # inline: refs are blocks


def test_a_spilled_block_cut_short_is_an_error(tmp_path):
    store = spill.SpillingStore(str(tmp_path))
    (ref,) = store.put('v', [blocks.pack([_meta(1)])])
    path = tmp_path / ref[0]
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(OSError, match='expected'):
        store.get(ref)


def test_payloads_are_read_back_in_the_order_asked_across_files_and_windows(tmp_path):
    store = spill.SpillingStore(str(tmp_path / 'blocks'))
    assert blocks.BlockStore().payloads() is None  # inline: the writer reads the inputs
    metas = []
    for item in range(5):  # five work items, five payload files
        payloads = store.payloads()
        for i in range(7):
            data = hashlib.sha256(f'{item}-{i}'.encode()).digest() * (1 + i)
            payload, offset = payloads.add(data)
            assert payloads.add(bytes(spill.PAYLOAD_MAX_BYTES + 1)) is None  # read again
            metas.append(
                _meta(10 * item + i, num_bytes=len(data))._replace(
                    payload=payload, payload_offset=offset
                )
            )
        payloads.close()
    assert len(list((tmp_path / 'blocks').iterdir())) == 5
    shuffled = sorted(metas, key=lambda meta: hashlib.sha256(meta.key.encode()).digest())
    expected = [
        hashlib.sha256(f'{m.id // 10}-{m.id % 10}'.encode()).digest() * (1 + m.id % 10)
        for m in shuffled
    ]
    assert list(store.read_payloads(shuffled, None)) == expected
    assert list(store.read_payloads(shuffled, None, window_bytes=100)) == expected  # windows
    assert list(store.read_payloads([], None)) == []
    # Images without a payload (too large to keep) are read by the function given.
    mixed = [m if m.id % 3 else m._replace(payload=0) for m in shuffled]
    asked = []  # the input files asked of the kernel ahead of their reads

    def read_input(meta):
        assert f'/in/{meta.id}' in asked, 'read before it was asked for'
        return f'input {meta.id}'.encode()

    read = list(
        store.read_payloads(mixed, read_input, path_of=lambda meta: asked.append(f'/in/{meta.id}'))
    )
    assert read == [
        data if m.payload else f'input {m.id}'.encode() for m, data in zip(mixed, expected)
    ]
    assert asked == [f'/in/{m.id}' for m in mixed if not m.payload]


def test_pack_round_trips_multi_label_images():
    metas = [
        _meta(0, label=(0, 3, 7), levels=((1,), (), (2, 4, 2**31 - 1))),
        _meta(1, label=(), levels=((), ())),  # no label, no level value
        _meta(2, label=(5,), levels=()),
        _meta(3),  # single-label images pack as before beside them
    ]
    assert blocks.unpack(blocks.pack(metas)) == metas
    many = _meta(4, label=tuple(range(3000)), levels=(tuple(range(300)),) * 3)
    assert blocks.unpack(blocks.pack([many])) == [many]


def test_a_payload_file_keeps_resizes_of_any_size_and_writes_as_it_goes(tmp_path):
    """A resize is kept whatever its size; what a work item holds in memory stays bounded."""
    store = spill.SpillingStore(str(tmp_path / 'blocks'))
    payloads = store.payloads()
    # Each larger than a small image and than half the write buffer: at most one buffer held.
    size = spill.PAYLOAD_MAX_BYTES + storage.WRITE_BUFFER // 2
    large = [bytes([i]) * size for i in range(6)]
    metas = []
    for i, data in enumerate(large):
        assert payloads.add(data) is None  # too large to keep, unless asked
        payload, offset = payloads.add(data, always=True)
        metas.append(_meta(i, num_bytes=len(data), payload=payload, payload_offset=offset))
        if i == 3:  # written as they come: the first ones are on disk already
            path = tmp_path / 'blocks' / spill.payload_name(payload)
            assert path.stat().st_size >= sum(map(len, large[:4])) - storage.WRITE_BUFFER
    payloads.close()
    assert list(store.read_payloads(metas[::-1], None)) == large[::-1]
