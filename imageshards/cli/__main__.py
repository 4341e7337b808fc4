"""`python -m imageshards.cli`: the `imageshards` command."""

import sys

from imageshards.cli.main import main

if __name__ == '__main__':
    sys.exit(main())
