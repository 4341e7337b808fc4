"""The `imageshards` command: one subcommand per tool, each a thin hand-off to its module."""

import difflib
import importlib
import sys

import imageshards
from imageshards import console

# command -> (module whose main(argv) runs it, what it does)
COMMANDS = {
    'build': ('pipelines.build', 'globally shuffle labeled images into balanced TFRecord shards'),
    'inspect': (
        'imageshards_cli.inspect',
        "show the schema and first records of a build's shards or any TFRecord files",
    ),
    'verify': (
        'imageshards_cli.verify',
        'read a build completely and check every shard, record and count against it',
    ),
    'report': (
        'imageshards_cli.report',
        'measure and plot how well training sees a build shuffled, against a baseline',
    ),
    'preview': (
        'imageshards_cli.preview',
        'draw a 5x5 grid of augmented training images (or patches) with their labels',
    ),
    'coco-annotations': (
        'imageshards_cli.coco_annotations',
        "write a detection build's split as a COCO annotation file (pycocotools' COCOeval)",
    ),
    'sample-data': (
        'imageshards_cli.sample_data',
        "write a small labeled image tree made from scikit-learn's digits",
    ),
    'submit-training': (
        'trainer.submit',
        'run the trainer as a Vertex AI custom job (docs/vertex.md)',
    ),
}


def usage():
    lines = ['usage: imageshards <command> [flags]   (or: imageshards --version)', '', 'commands:']
    lines += [f'  {name:<17}{summary}' for name, (_, summary) in COMMANDS.items()]
    lines += ['', "`imageshards <command> --help` describes a command's flags."]
    return '\n'.join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ('-h', '--help'):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ('--version', '-V'):
        print(f'imageshards {imageshards.__version__}')
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f' (did you mean {close[0]}?)' if close else ''
        print(f'imageshards: unknown command {command!r}{hint}\n\n{usage()}', file=sys.stderr)
        return 2
    # Imported on demand: `imageshards verify` need not load Beam, nor `build` TensorFlow.
    module = importlib.import_module(COMMANDS[command][0])
    try:
        # A module's `command` is what a person runs (the build's runs it supervised, its
        # workers with it: pipelines/build.py decides how).
        return (getattr(module, 'command', None) or module.main)(rest)
    except KeyboardInterrupt:
        print(f'imageshards {command}: interrupted', file=sys.stderr)
        return console.INTERRUPTED_EXIT_CODE


if __name__ == '__main__':
    sys.exit(main())
