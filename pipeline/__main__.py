"""`python -m pipeline ...`: the command line (pipeline/cli.py)."""

from pipeline.cli import exit_cleanly, main

exit_cleanly(main())
