"""``python -m instance_factory.cli``: the same program as ``python -m instance_factory``."""

import sys

from . import main

sys.exit(main())
