"""Listing local inputs in a process of its own, while the build's launcher imports Beam.

The launcher's first seconds go to importing Beam and then to listing the inputs, one after the
other, on one core (bench/RESULTS.md, "Against the peers, after the early listing", has the
figures). So the `imageshards build` command starts this process first (`start_early`), where
its input is a local folder or file (an archive, arrays, TFRecords): it lists the inputs into a
listing file of its own, through the same code (pipelines/inputs/listing.py, which imports no
Beam), and the build takes the file (`take`) in place of listing itself, once its options are
parsed and are those the listing was made for. Where this process fails, or the build asks for
something else, the build lists as before, and says what went wrong in its own words.

    python -m pipelines.local.early_listing FOLDER PARAMETERS_JSON
"""

import collections
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

from imageshards import storage
from pipelines.core.settings import InputSettings
from pipelines.inputs import entries
from pipelines.inputs import forms
from pipelines.inputs import listing

_LOG = logging.getLogger(__name__)
LISTING = 'listing.jsonl'
RESULT = 'result.json'  # the ListingCounts, the InputScan but for its entries, logged lines
_early = None


def parameters(config):
    """What a listing depends on, of a BuildConfig."""
    return {
        'input': config.input,
        'chunk_size': config.chunk_size,
        'max_image_bytes': config.max_image_bytes,
        'inputs': dataclasses.asdict(config.inputs),
    }


class EarlyListing:
    """The listing process and its folder."""

    def __init__(self, params):
        self.params = params
        self.folder = tempfile.mkdtemp(prefix='imageshards-listing-')
        self._process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, '-m', __name__, self.folder, json.dumps(params)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def result(self):
        """(listing file, ListingCounts, InputScan) once the process is done, after logging what
        it logged; None if it failed."""
        if self._process.wait() != 0:
            return None
        with open(os.path.join(self.folder, RESULT), encoding='utf-8') as f:
            result = json.load(f)
        for name, level, message in result['logged']:
            if name != forms.__name__:  # what --input is: said by the launcher's own scan
                logging.getLogger(name).log(level, '%s', message)
        scan = entries.InputScan(
            result['base'],
            iter(()),
            collections.Counter(result['skipped']),
            result['skipped_examples'],
            result['levels'],
            result['multi_label'],
            result['form'],
            result['kind'],
            result['kind_options'],
            result['classes'],
            result['annotation_rejections'],
            result['annotation_join'],
        )
        counts = entries.ListingCounts.from_json(result['counts'])
        return os.path.join(self.folder, LISTING), counts, scan

    def close(self):
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_early(config):
    """Starts listing now where `config` (the build's BuildConfig, peeked from its arguments)
    names a local folder or file as its input; returns the EarlyListing, or None."""
    global _early  # pylint: disable=global-statement
    if not _local_input(config.input) or storage.is_uri(config.inputs.image_root or ''):
        return None  # a COCO file's images on an object store: their archive, the workers index
    _early = EarlyListing(parameters(config))
    return _early


def listing_for(config, scan, folder):
    """(listing file, ListingSummary) of a build: the early listing's, where it was made for
    `config` and succeeded (its file moved into `folder`), else `scan` written there now.

    Raises:
        ValueError: nothing to build.
    """
    path = os.path.join(folder, LISTING)
    early = _take()
    taken = early.result() if early and early.params == parameters(config) else None
    if taken is None:
        if early:
            early.close()
        return path, listing.write_listing_file(
            scan, path, config.chunk_size, config.input, config.max_image_bytes
        )
    made, counts, early_scan = taken
    for name in (made, listing.index_path(made)):
        os.replace(name, os.path.join(folder, os.path.basename(name)))
    early.close()
    _LOG.debug('the inputs were listed by the early listing process')
    return path, listing.summarise(config.input, early_scan, counts)


def stop_untaken():
    """Stops an early listing no build took."""
    early = _take()
    if early:
        early.close()


def _take():
    global _early  # pylint: disable=global-statement
    early, _early = _early, None
    return early


def _local_input(spec):
    """A local folder, or a local file that is no manifest nor image (an archive, arrays,
    TFRecords, which the listing indexes; another fails there, and the build says why)."""
    if storage.is_uri(spec) or entries.is_manifest(spec) or listing.is_glob(spec):
        return False
    if os.path.isfile(spec):
        return entries.extension(spec) not in entries.IMAGE_EXTENSIONS
    return os.path.isdir(spec)


class _Keep(logging.Handler):
    """Keeps what is logged, for the launcher to log as it takes the listing."""

    def __init__(self):
        super().__init__()
        self.logged = []  # [logger name, level, message]

    def emit(self, record):
        self.logged.append([record.name, record.levelno, record.getMessage()])


def main(argv=None):
    folder, params = sys.argv[1:] if argv is None else argv
    params = json.loads(params)
    kept = _Keep()
    logging.getLogger().addHandler(kept)
    logging.getLogger().setLevel(logging.INFO)
    scan = listing.scan_inputs(params['input'], InputSettings.from_json(params['inputs']))
    counts = listing.write_counted(
        scan, os.path.join(folder, LISTING), params['chunk_size'], params['max_image_bytes']
    )
    result = {
        'counts': counts.to_json(),
        'base': scan.base,
        'skipped': dict(scan.skipped),
        'skipped_examples': scan.skipped_examples,
        'levels': scan.levels,
        'multi_label': scan.multi_label,
        'form': scan.form,
        'kind': scan.kind,
        'kind_options': scan.kind_options,
        'classes': scan.classes,
        'annotation_rejections': scan.annotation_rejections,
        'annotation_join': scan.annotation_join,
        'logged': kept.logged,
    }
    with open(os.path.join(folder, RESULT), 'w', encoding='utf-8') as f:
        json.dump(result, f)
    return 0


if __name__ == '__main__':
    sys.exit(main())
