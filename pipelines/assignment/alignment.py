"""Whether two images whose window hashes are close are copies of one picture, or only look
alike: their grey thumbnails (pipelines/validation/perceptual.py) aligned and correlated.

Hashes of 64 low-frequency bits cannot tell a copy from a different cut of a picture whose broad
shapes are the same (a retina's rim, a night sky, the Hubble deep field): such pairs are 6-10
bits apart, closer than many crops are to their originals. The thumbnails can: where the hashes
of window `wa` of one image and window `wb` of the other agree, the first guess is that `wa`
shows what `wb` shows; a few Gauss-Newton steps refine that map (a scale and a shift per axis,
with a gain and an offset of grey), and the images are copies where the detail of their
thumbnails (each less a blur of itself) then correlates at THRESHOLD or more over where they
overlap. A copy keeps its detail wherever it is cropped or shifted; two cuts of a rim keep only
the rim.

THRESHOLD was calibrated on a third set, made apart from the held-out one that
bench/near_duplicate_crops.py reports on (bench/RESULTS.md, "Cropped near-duplicates").

CheckLinks runs the check on the links FindNearDuplicates' buckets found, after them: each
image's thumbnail is read once from its block and joined by image id to its links, first at the
link's lower id (which carries its thumbnail on to the other image), then at the higher one,
where both thumbnails meet. An image pair met in several buckets is checked once, from its
TRIES closest window pairs, each both ways (the first thumbnail mapped into the second, then the
second into the first: `likeness` measures the overlap on its first), and is copies where any
says so.

    (refs, links) -> Thumbnails -> JoinFirst (a) -> CarryFirst -> JoinSecond (b) -> Check
"""

import apache_beam as beam
import numpy as np

from pipelines.core import blocks
from pipelines.validation import perceptual
from pipelines.validation.perceptual import THUMBNAIL_SIDE

THRESHOLD = 0.75  # the least with no false pair on the calibration set
_STEPS = 6
_MAX_STEP = 0.03  # of a side, per step: a map starts within a few % of the right one
_MIN_OVERLAP = 0.4  # of the first thumbnail, seen in the second
_FLAT = 2.0  # grey levels: a thumbnail that varies less is blank (of one colour)
TRIES = 1  # window pairs an image pair is checked from (each both ways), closest first


def _blur_matrix(sigma, side=THUMBNAIL_SIDE):
    """M such that M @ x blurs the columns of x with a Gaussian, edges repeated."""
    offsets = np.arange(-3 * int(np.ceil(sigma)), 3 * int(np.ceil(sigma)) + 1)
    weights = np.exp(-0.5 * (offsets / sigma) ** 2)
    weights /= weights.sum()
    matrix = np.zeros((side, side))
    for offset, weight in zip(offsets, weights):
        np.add.at(matrix, (np.arange(side), np.clip(np.arange(side) + offset, 0, side - 1)), weight)
    return matrix


_SMOOTH = _blur_matrix(1.0)  # what the steps follow
_COARSE = _blur_matrix(1.5)  # what the detail is measured against
_CENTRES = (np.arange(THUMBNAIL_SIDE) + 0.5) / THUMBNAIL_SIDE
_UX, _UY = (grid.ravel() for grid in np.meshgrid(_CENTRES, _CENTRES))


def _sample(image, x, y):
    """Bilinear samples of `image` (or of a stack of images) at pixel coordinates (x, y) inside
    it."""
    last = THUMBNAIL_SIDE - 2
    x0 = np.minimum(x.astype(int), last)  # x >= 0: truncation is the floor
    y0 = np.minimum(y.astype(int), last)
    fx, fy = x - x0, y - y0
    top = image[..., y0, x0] * (1 - fx) + image[..., y0, x0 + 1] * fx
    bottom = image[..., y0 + 1, x0] * (1 - fx) + image[..., y0 + 1, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy


def _inside(params):
    """(x, y, mask) of the thumbnail's pixel centres mapped by `params` into the other's pixel
    coordinates, and which land inside it."""
    x = (params[0] * _UX + params[1]) * THUMBNAIL_SIDE - 0.5
    y = (params[2] * _UY + params[3]) * THUMBNAIL_SIDE - 0.5
    limit = THUMBNAIL_SIDE - 1
    return x, y, (x >= 0) & (x <= limit) & (y >= 0) & (y <= limit)


def _refine(first, second, params):
    """The map `params` (x scale, x shift, y scale, y shift) from `first`'s unit square into
    `second`'s, refined by Gauss-Newton steps on the smoothed thumbnails; None where too little
    of `first` lands in `second`."""
    smooth_first = (_SMOOTH @ first @ _SMOOTH.T).ravel()
    smooth_second = _SMOOTH @ second @ _SMOOTH.T
    stack = np.stack([smooth_second, *np.gradient(smooth_second)[::-1]])  # value, d/dx, d/dy
    for _ in range(_STEPS):
        x, y, inside = _inside(params)
        if inside.mean() < _MIN_OVERLAP:
            return None
        x, y = x[inside], y[inside]
        seen, dx, dy = _sample(stack, x, y)
        seen = _centred(seen)
        grey = _centred(smooth_first[inside])  # the residual is free of a gain and an offset
        grey /= max(float(np.linalg.norm(grey)), 1e-9)
        residual = seen - grey * float(grey @ seen)
        dx, dy = dx * THUMBNAIL_SIDE, dy * THUMBNAIL_SIDE
        jacobian = _centred(np.stack([dx * _UX[inside], dx, dy * _UY[inside], dy], 1))
        jacobian -= np.outer(grey, grey @ jacobian)
        normal = jacobian.T @ jacobian + 1e-9 * np.eye(4)
        step = np.linalg.solve(normal, -(jacobian.T @ residual))
        params = params + np.minimum(np.maximum(step, -_MAX_STEP), _MAX_STEP)
    return params


def _centred(values):
    return values - values.mean(axis=0)


def _detail(thumbnail):
    return thumbnail - _COARSE @ thumbnail @ _COARSE.T


def likeness(first, second, window_first, window_second) -> float:
    """The correlation (-1 to 1) of the detail of two thumbnails (uint8, 32x32) once aligned,
    starting from the map of `window_first` (left, top, right, bottom, shares of the first
    image) onto `window_second`; -1 where they cannot be aligned. Two blank thumbnails are 1."""
    first, second = first.astype(np.float64), second.astype(np.float64)
    detail_first, detail_second = _detail(first), _detail(second)
    flat = first.std() < _FLAT, second.std() < _FLAT
    if any(flat):
        return 1.0 if all(flat) else -1.0
    left, top, right, bottom = window_first
    left_b, top_b, right_b, bottom_b = window_second
    scale_x, scale_y = (right_b - left_b) / (right - left), (bottom_b - top_b) / (bottom - top)
    params = np.array([scale_x, left_b - left * scale_x, scale_y, top_b - top * scale_y])
    params = _refine(first, second, params)
    if params is None:
        return -1.0
    x, y, inside = _inside(params)
    if inside.mean() < _MIN_OVERLAP:
        return -1.0
    a = detail_first.ravel()[inside]
    b = _sample(detail_second, x[inside], y[inside])
    a, b = a - a.mean(), b - b.mean()
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-9))


def copies(first, second, window_first, window_second) -> bool:
    """Whether two thumbnails are of copies of one picture (`likeness` at THRESHOLD or more)."""
    return likeness(first, second, window_first, window_second) >= THRESHOLD


class CheckLinks(beam.PTransform):
    """(block refs, links) -> [(a, b, distance)] per image b: the links whose thumbnails say
    they are copies (`copies`); a link of an image with a bare hash (no thumbnail) is kept.

    Links are (a, (b, distance, window of a, window of b)), a < b, windows indices into
    perceptual.WINDOWS.
    """

    def __init__(self, store):
        super().__init__()
        self._store = store

    def expand(self, inputs):
        refs, links = inputs
        thumbnails = refs | 'Thumbnails' >> beam.ParDo(_Thumbnails(self._store))
        # (image id, 32x32 thumbnail bytes) of each image with a signature
        carried = (
            {'thumbnail': thumbnails, 'links': links}
            | 'JoinFirst' >> beam.CoGroupByKey()
            | 'CarryFirst' >> beam.FlatMap(carry_first)
        )
        # (b, (a, a's thumbnail or b'', ((distance, window of a, window of b), ...)))
        return (
            {'thumbnail': thumbnails, 'links': carried}
            | 'JoinSecond' >> beam.CoGroupByKey()
            | 'Check' >> beam.FlatMap(check)
        )


class _Thumbnails(beam.DoFn):
    """Block ref -> (image id, thumbnail bytes) of each image in it with a signature."""

    def __init__(self, store):
        self._store = store

    def process(self, ref):
        for meta in blocks.unpack(self._store.get(ref)):
            if meta.phash >> perceptual.HASH_BITS > 0:
                yield meta.id, perceptual.parts(meta.phash)[1].tobytes()


def carry_first(joined):
    """(a, {'thumbnail': [a's], 'links': [(b, distance, window a, window b)]}) -> one element
    per image b: (b, (a, a's thumbnail or b'', its TRIES closest window pairs))."""
    a, found = joined
    thumbnail = next(iter(found['thumbnail']), b'')
    tries = {}
    for b, apart, window_a, window_b in found['links']:
        tries.setdefault(b, set()).add((apart, window_a, window_b))
    for b, pairs in sorted(tries.items()):
        yield b, (a, thumbnail, tuple(sorted(pairs)[:TRIES]))


def check(joined):
    """(b, {'thumbnail': [b's], 'links': [(a, a's thumbnail, window pairs)]}) -> [(a, b,
    distance)] of the links that pass, where any does."""
    b, found = joined
    thumbnail_b = next(iter(found['thumbnail']), b'')
    edges = []
    for a, thumbnail_a, tries in found['links']:
        if not (thumbnail_a and thumbnail_b):  # a bare hash: the hash decides
            edges.append((a, b, tries[0][0]))
            continue
        first, second = _thumbnail(thumbnail_a), _thumbnail(thumbnail_b)
        for apart, window_a, window_b in tries:
            window_a, window_b = perceptual.WINDOWS[window_a], perceptual.WINDOWS[window_b]
            if copies(first, second, window_a, window_b) or copies(
                second, first, window_b, window_a
            ):
                edges.append((a, b, apart))
                break
    if edges:
        yield edges


def _thumbnail(data):
    return np.frombuffer(data, np.uint8).reshape(THUMBNAIL_SIDE, THUMBNAIL_SIDE)
