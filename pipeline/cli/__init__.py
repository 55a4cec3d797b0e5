"""The command line, `python -m pipeline COMMAND`.

main.py: the top parser (every command's, in the order `--help` lists them) and `main`, which
turns a config, storage or refusal error into one line and its exit code;
common.py: the options the commands share (--config, --input, --output, --set, --endpoint-url)
and the config or storage options they give;
the commands, each beside its parser: run_commands.py (run, curate-preview),
version_commands.py (verify, find, blend), takedown_commands.py (remove, takedown-lift),
cost_commands.py (retain, report), plan_commands.py (plan), tool_commands.py (bench, config,
warm);
args.py: the argument types (sizes, ratios, files) and the parser that reports a bad one;
exit_codes.py: the exit status of each outcome, listed in `--help`.
"""
