"""``python -m selfpref_sweep.analysis --help``"""

import sys

from .job.command import main

if __name__ == "__main__":
    sys.exit(main())
