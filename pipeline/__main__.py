"""`python -m pipeline ...`: the command line (pipeline/cli/main.py)."""

from pipeline.cli.main import exit_cleanly, main

exit_cleanly(main())
