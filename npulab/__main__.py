"""``python -m npulab`` is the ``npulab`` command."""

import sys

from npulab.cli import main

sys.exit(main())
