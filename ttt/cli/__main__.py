"""`python -m ttt.cli ARGS` runs the command line."""

import sys

from ttt.cli.app import main

sys.exit(main())
