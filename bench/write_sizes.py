"""What a shard's bytes cost to write by the size of each write(2), on this machine.

Writes 1 GiB to a new file in pieces of each size (and through the ArrayRecord library, whose
writer hands the kernel 1-16 MB at a time), alternated round by round, after the memory freed by
the last round has sat free for `--idle` seconds, and prints the system CPU seconds of each.

Why: the ArrayRecord build's extra cost over the TFRecord build is system time in the kernel's
copy of written bytes into the page cache (`perf record` of the two builds:
copy_folio_from_iter_atomic 17.9% of the ArrayRecord build's samples, 1.4% of the TFRecord
build's, for the same gigabyte). Large writes get large page-cache folios, taken from the
free blocks of 2 MB and more that a VM's balloon reports to its host when they have been free
for a few seconds; the host then backs each page again on its first touch. Writes of a record
at a time (TFRecord: one framed record, ~48 KB) take small folios from memory the kernel keeps.

    python -m bench.write_sizes [--rounds 3] [--idle 6] [--dir /tmp]
"""

import argparse
import glob
import os
import resource
import time

GIB = 1 << 30
SIZES = (48 << 10, 1 << 20, 16 << 20)


def system_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def write_pieces(path, size):
    """1 GiB to `path` in writes of `size` bytes."""
    piece = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for _ in range(GIB // size):
            os.write(fd, piece)
    finally:
        os.close(fd)


def write_array_record(path, records):
    """About 1 GiB of records through the ArrayRecord writer, as the build writes a shard."""
    from array_record.python import array_record_module  # pylint: disable=import-outside-toplevel

    from imageshards.shard_formats import array_record  # pylint: disable=import-outside-toplevel

    writer = array_record_module.ArrayRecordWriter(path, array_record.WRITER_OPTIONS)
    written = 0
    while written < GIB:
        for record in records:
            writer.write(record)
            written += len(record)
    writer.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--idle', type=float, default=6.0, help='seconds between writes')
    parser.add_argument('--dir', default='/tmp')
    parser.add_argument('--photos', default='bench/out/photos-20000-500x375')
    args = parser.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.photos, '*', '*.jpg')))[:2000]
    records = [open(name, 'rb').read() for name in files]  # noqa: SIM115
    if not records:
        raise SystemExit(f'no JPEGs in {args.photos}: run python -m bench.peers --formats first')
    writers = {f'write({size >> 10} KiB)': (write_pieces, size) for size in SIZES}
    writers['ArrayRecord writer'] = (write_array_record, records)
    found = {name: [] for name in writers}
    path = os.path.join(args.dir, 'imageshards-write-sizes.out')
    for round_ in range(args.rounds):
        for name, (write, what) in writers.items():
            time.sleep(args.idle)
            before = system_seconds()
            write(path, what)
            found[name].append(system_seconds() - before)
            os.remove(path)
            print(f'  round {round_ + 1}: {name:<22}{found[name][-1]:6.2f} s system', flush=True)
    print(f'\nsystem seconds per GiB written, median of {args.rounds} (after {args.idle:g} s idle)')
    for name, seconds in found.items():
        print(f'{name:<24}{sorted(seconds)[len(seconds) // 2]:6.2f}')


if __name__ == '__main__':
    main()
