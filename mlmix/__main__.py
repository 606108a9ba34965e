"""``python -m mlmix``: the ``mlmix`` command (:func:`mlmix.cli.main`)."""

import sys

from mlmix.cli import main

sys.exit(main())
