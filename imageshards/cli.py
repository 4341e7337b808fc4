"""The `imageshards` command: one subcommand per tool, each a thin hand-off to its module."""

import sys

_USAGE = """usage: imageshards <command> [flags]

commands:
  build         globally shuffle labeled images into balanced TFRecord shards (Apache Beam)
  inspect       show the schema and first records of a build's shards or any TFRecord files
  verify        read a build completely and check every shard, record and count against it
  sample-data   write a small labeled image tree made from scikit-learn's digits

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
    if command == 'sample-data':
        from imageshards import sample_data  # pylint: disable=import-outside-toplevel

        return sample_data.main(rest)
    print(f'imageshards: unknown command {command!r}\n\n{_USAGE}', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
