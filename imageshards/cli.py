"""The `imageshards` command: one subcommand per tool, each a thin hand-off to its module."""

import sys

_USAGE = """usage: imageshards <command> [flags]

commands:
  build         globally shuffle labeled images into balanced TFRecord shards (Apache Beam)
  inspect       show the schema and first records of a build's shards or any TFRecord files
  verify        read a build completely and check every shard, record and count against it
  report        measure and plot how well training sees a build shuffled, against a baseline
  preview       draw a 5x5 grid of augmented training images (or patches) with their labels
  sample-data   write a small labeled image tree made from scikit-learn's digits
  submit-training  run the trainer as a Vertex AI custom job (docs/vertex.md)

`imageshards <command> --help` describes a command's flags.
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ('-h', '--help'):
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == 'build':
        from pipelines import build  # pylint: disable=import-outside-toplevel

        return build.main(rest)
    if command == 'inspect':
        from imageshards import inspect  # pylint: disable=import-outside-toplevel

        return inspect.main(rest)
    if command == 'verify':
        from imageshards import verify  # pylint: disable=import-outside-toplevel

        return verify.main(rest)
    if command == 'report':
        from imageshards import report  # pylint: disable=import-outside-toplevel

        return report.main(rest)
    if command == 'preview':
        from imageshards import preview  # pylint: disable=import-outside-toplevel

        return preview.main(rest)
    if command == 'sample-data':
        from imageshards import sample_data  # pylint: disable=import-outside-toplevel

        return sample_data.main(rest)
    if command == 'submit-training':
        from trainer import submit  # pylint: disable=import-outside-toplevel

        return submit.main(rest)
    print(f'imageshards: unknown command {command!r}\n\n{_USAGE}', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
