"""``python -m keras_pickle demo``."""

import sys

from .cli import main

sys.exit(main())
