"""`python -m imageshards_cli`: the `imageshards` command."""

import sys

from imageshards_cli.main import main

if __name__ == '__main__':
    sys.exit(main())
