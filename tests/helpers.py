"""The old name of tests/support, kept so that tests written before it still import: new tests
import `from support import ...`."""

from support import *  # noqa: F403
from support import __all__  # noqa: F401
