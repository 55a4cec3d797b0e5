"""The command line, `python -m pipeline COMMAND`.

main.py: the parser of every command, the commands themselves and `main`;
args.py: the argument types (sizes, ratios, files) and the parser that reports a bad one;
exit_codes.py: the exit status of each outcome, listed in `--help`.
"""
