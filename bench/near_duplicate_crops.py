"""Cropped near-duplicates on held-out data (bench/crop_data.py: other photographs, another
generator than bench/trusted_data.py): clusters kept whole, copies joined per kind, and false
pairs, for our hash and for the peers, side by side in one run.

    python -m bench.near_duplicate_crops DATA [--scenes 700] [--seed 1]

(DATA is made first where it is not there.) Contenders, each pairing images whose hashes are
within 10 bits, every pair compared:
    ours            the build's --near-duplicates: perceptual.py's signatures through
                    neighbours.py's banded search (windows met, thumbnails verified): the
                    pairs it joins (a spanning forest); CPU is the signature's, then the
                    search's, per image
    whole hash      the 64-bit hash of the whole image alone (--near-duplicates before windows)
    imagededup      imagededup's PHash at its defaults (max_distance_threshold=10)
    imagehash       imagehash.phash at its defaults (hash_size=8)
    windows T       a prototype, not in the build: three of our hashes per image (the whole,
                    its centre 90%, its centre 81%); candidates within 10 bits whole or centre
                    against whole or centre, kept where two nested windows agree in at most T
                    of 128 bits, aligned (a re-encode) or one window inward (a border crop)

A cluster is whole where the pairs found join all its images; a copy is joined where it is in
its original's component; a pair is false where its images are of different clusters (they
overlap by less than 0.5: distinct scenes, look-alikes among them). imagededup loads without
torch (its CNN half is not imported): `pip install --no-deps imagededup PyWavelets`.
"""

import argparse
import collections
import importlib
import io
import os
import sys
import time
import types

import numpy as np
from PIL import Image

from bench import crop_data
from pipelines.validation import images
from pipelines.validation import perceptual

DISTANCE = 10
SHUFFLE_KEY_BITS = 13  # what neighbours.key_bits_for gives 100M images
WINDOWS = (1.0, 0.9, 0.81)  # the prototype's nested windows, as shares of each side


def imagededup_phash():
    """imagededup's PHash class, imported without its CNN half (torch, torchvision), or None
    where imagededup is not installed."""
    try:
        import imagededup  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    folder = os.path.dirname(imagededup.__file__)
    for name in ('utils', 'methods'):  # empty packages: their __init__ imports the CNN models
        package = types.ModuleType(f'imagededup.{name}')
        package.__path__ = [os.path.join(folder, name)]
        sys.modules[f'imagededup.{name}'] = package
    return importlib.import_module('imagededup.methods.hashing').PHash


def _timed(function, items):
    started = time.process_time()
    found = [function(item) for item in items]
    return found, (time.process_time() - started) / len(items)


def window_hashes(data):
    """The prototype's hashes of `data`: our hash of each nested window (centred) of the image
    decoded as perceptual.py decodes it."""
    image = Image.open(io.BytesIO(data))
    if image.format == 'JPEG':
        image.draft('L', (images.draft_side(image.width, 32), images.draft_side(image.height, 32)))
    grey = image.convert('L')
    found = []
    for share in WINDOWS:
        margin = (1 - share) / 2
        box = (
            grey.width * margin,
            grey.height * margin,
            grey.width * (1 - margin),
            grey.height * (1 - margin),
        )
        found.append(perceptual.hash_of_image(grey.resize((32, 32), Image.Resampling.BOX, box=box)))
    return found


def banded_pairs(signatures, distance=DISTANCE, key_bits=None):
    """(the pairs the build joins: an N x N bool matrix, CPU seconds per image, {step: shuffled
    bytes per image}) of images whose ids are their indices, by FindNearDuplicates' steps run in
    this process, its GroupByKey and CoGroupByKeys done with dicts. Shuffled bytes are those of
    the elements' values (bytes their length, an int 8, a window 1), keys left out; `key_bits`
    keys the buckets (by default as the build would for N images)."""
    from pipelines.assignment import alignment  # pylint: disable=import-outside-toplevel
    from pipelines.assignment import neighbours  # pylint: disable=import-outside-toplevel
    from pipelines.core import blocks  # pylint: disable=import-outside-toplevel

    started = time.process_time()
    metas = [
        blocks.ImageMeta(i, f'{i}', 0, '', 'jpeg', 1, 1, 1, b'', 0, b'', 0, False, phash=s)
        for i, s in enumerate(signatures)
    ]
    refs = [blocks.pack(metas[block : block + 1000]) for block in range(0, len(metas), 1000)]
    layout = neighbours.band_layout(distance)
    key_bits = neighbours.key_bits_for(len(metas)) if key_bits is None else key_bits
    # pylint: disable=protected-access
    keyed = neighbours._KeyByBand(blocks.BlockStore(), layout, key_bits)
    shuffled = collections.Counter()
    buckets = collections.defaultdict(list)
    for ref in refs:
        for key, value in keyed.process(ref):
            buckets[key].append(value)
            shuffled['buckets'] += sum(len(part) for part in value)
    in_buckets = neighbours._LinksInBuckets(layout, distance)
    first = collections.defaultdict(lambda: {'thumbnail': [], 'links': []})
    for grouped in buckets.items():
        for packed in in_buckets.process(grouped):
            for a, link in neighbours.keyed_links(packed):
                first[a]['links'].append(link)
                shuffled['links'] += 8 + 1 + 2
    second = collections.defaultdict(lambda: {'thumbnail': [], 'links': []})
    for ref in refs:
        for image, thumbnail in alignment._Thumbnails(blocks.BlockStore()).process(ref):
            for joined in (first, second):
                joined[image]['thumbnail'].append(thumbnail)
                shuffled['thumbnails'] += len(thumbnail)
    for element in list(first.items()):
        for b, carried in alignment.carry_first(element):
            second[b]['links'].append(carried)
            shuffled['carried'] += 8 + len(carried[1]) + 3 * len(carried[2])
    paired = np.zeros((len(metas), len(metas)), bool)
    for element in second.items():
        for edges in alignment.check(element):
            edges = np.array(edges)
            paired[edges[:, 0], edges[:, 1]] = paired[edges[:, 1], edges[:, 0]] = True
    seconds = (time.process_time() - started) / len(metas)
    return paired, seconds, {step: n / len(metas) for step, n in shuffled.items()}


def _apart(a, b):
    a, b = np.asarray(a, np.uint64), np.asarray(b, np.uint64)
    return np.bitwise_count(a[:, None] ^ b[None, :]).astype(np.int16)


def window_pairs(hashes, limit):
    """Pairs (an N x N bool matrix) of the prototype at score `limit`."""
    h = np.asarray(hashes, np.uint64)
    d11, d22 = _apart(h[:, 0], h[:, 0]), _apart(h[:, 1], h[:, 1])
    d12, d23 = _apart(h[:, 0], h[:, 1]), _apart(h[:, 1], h[:, 2])
    candidate = np.minimum(np.minimum(d11, d22), np.minimum(d12, d12.T)) <= DISTANCE
    score = np.minimum(d11 + d22, np.minimum(d12 + d23, d12.T + d23.T))
    return candidate & (score <= limit)


def score(truth, paired):
    """(clusters whole, clusters, false pairs, false pairs with a look-alike, {kind: (joined,
    copies)}) of the pairs `paired` (an N x N bool matrix)."""
    from scipy.sparse import csgraph  # pylint: disable=import-outside-toplevel

    cluster = np.array([image['cluster'] for image in truth['images']])
    kinds = [image['kind'] for image in truth['images']]
    same = cluster[:, None] == cluster[None, :]
    upper = np.triu(np.ones_like(same), 1)
    false = paired & upper & ~same
    lookalike = np.array([kind == 'lookalike' for kind in kinds])
    _, component = csgraph.connected_components(paired & same, directed=False)
    members = collections.defaultdict(set)
    for index, name in enumerate(cluster):
        members[name].add(index)
    multi = [m for m in members.values() if len(m) > 1]
    whole = sum(len({component[i] for i in m}) == 1 for m in multi)
    first = {name: min(m) for name, m in members.items()}
    joined = collections.defaultdict(lambda: [0, 0])
    for index, kind in enumerate(kinds):
        if kind not in ('original', 'lookalike'):
            joined[kind][0] += int(component[index] == component[first[cluster[index]]])
            joined[kind][1] += 1
    with_lookalike = false & (lookalike[:, None] | lookalike[None, :])
    return whole, len(multi), int(false.sum()), int(with_lookalike.sum()), dict(joined)


def contenders(data, truth, ours_only=False):
    """[(name, pairs, CPU seconds per image)] of every contender installed (ours alone where
    `ours_only`)."""
    paths = [os.path.join(data, image['path']) for image in truth['images']]
    contents = [open(path, 'rb').read() for path in paths]  # noqa: SIM115
    ours, seconds = _timed(perceptual.perceptual_hash, contents)
    paired, search, _ = banded_pairs(ours)
    _, _, shuffled = banded_pairs(ours, key_bits=SHUFFLE_KEY_BITS)
    print(
        f'ours: shuffled bytes per image ({SHUFFLE_KEY_BITS} key bits, as 100M images): '
        + ', '.join(f'{step} {n:,.0f}' for step, n in shuffled.items())
        + f'; in all {sum(shuffled.values()):,.0f}'
    )
    found = [(f'ours (signature {seconds * 1e3:.2f} ms + search)', paired, search)]
    if ours_only:
        return found
    whole = [perceptual.whole_hash(signature) for signature in ours]
    found.append(('whole hash', _apart(whole, whole) <= DISTANCE, seconds))
    phash = imagededup_phash()
    if phash is not None:
        method = phash(verbose=False)
        theirs, seconds = _timed(lambda path: int(method.encode_image(image_file=path), 16), paths)
        found.append(('imagededup PHash', _apart(theirs, theirs) <= DISTANCE, seconds))
    try:
        import imagehash  # pylint: disable=import-outside-toplevel

        def hash_file(path):
            with Image.open(path) as image:
                return int(str(imagehash.phash(image)), 16)

        theirs, seconds = _timed(hash_file, paths)
        found.append(('imagehash phash', _apart(theirs, theirs) <= DISTANCE, seconds))
    except ImportError:
        pass
    windows, seconds = _timed(window_hashes, contents)
    for limit in (16, 20):
        found.append((f'windows T{limit}', window_pairs(windows, limit), seconds))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('data')
    parser.add_argument('--scenes', type=int, default=700)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args(argv)
    truth = crop_data.make(args.data, args.scenes, args.seed)
    counts = collections.Counter(image['kind'] for image in truth['images'])
    print(f'{len(truth["images"])} images: {dict(sorted(counts.items()))}')
    report(args.data, truth)


def report(data, truth, ours_only=False):
    """Prints the table: each contender's clusters whole, false pairs, CPU and copies joined."""
    rows = [
        (name, score(truth, pairs), seconds)
        for name, pairs, seconds in contenders(data, truth, ours_only)
    ]
    kinds = sorted(rows[0][1][4])
    print('contender | clusters whole | false pairs (look-alike) | CPU/image | ' + ' '.join(kinds))
    for name, (whole, clusters, false, lookalike, joined), seconds in rows:
        per_kind = ' '.join(f'{joined[k][0]}/{joined[k][1]}' for k in kinds)
        print(
            f'{name} | {whole}/{clusters} | {false} ({lookalike}) | {seconds * 1e3:.2f} ms | '
            f'{per_kind}'
        )


if __name__ == '__main__':
    main()
