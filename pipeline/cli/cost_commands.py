"""The commands over a dataset's storage bill: `retain` (the retention plan; --apply
carries it out) and `report` (what is retained and read, and its price a month), each
with its parser."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import args as cli_args
from pipeline.cli.common import add_config_args, check_storage, config_from_args
from pipeline.cli.exit_codes import CONFIG_ERROR


def cmd_retain(args: argparse.Namespace) -> int:
    from pipeline.retention.apply import apply_plan
    from pipeline.retention.plan import format_plan, plan_retention

    cfg = config_from_args(args)
    check_storage(cfg, *(s.uri for s in cfg.sources), cfg.output.uri)
    plan = plan_retention(cfg)
    print(format_plan(plan, verbose=args.verbose, applied=args.apply))
    if args.export_lifecycle:
        import json

        from pipeline.retention.lifecycle import export_lifecycle

        exported = export_lifecycle(plan, cfg.retention.rules)
        with open(args.export_lifecycle, "w") as f:
            json.dump(exported, f, indent=2)
        print(f"lifecycle rules written to {args.export_lifecycle}")
        for item in exported["not_expressible"]:
            print(f"  not expressible as an S3 rule: {item['class']}: {item['reason']}")
    if args.tag_read:
        from pipeline.retention.tagging import read_tag, tag_read

        tagged = tag_read(plan)
        tag = read_tag(cfg.name)
        print(
            f"tagged {tag['Key']}={tag['Value']}: {tagged.tagged} objects now,"
            f" {tagged.already} already; {tagged.local} local files skipped (no tags)"
            + (
                f"; {len(tagged.replaced)} replaced while tagging, untagged"
                if tagged.replaced
                else ""
            )
        )
    if args.apply:
        audit = apply_plan(plan, cfg)
        done = [e for e in audit if e["status"] == "done"]
        print(
            f"applied: {len(done)} actions, {sum(e['bytes'] for e in done):,} bytes;"
            f" {len(audit) - len(done)} skipped or failed"
            + ("; audit log under _audit/" if audit else "")
        )
        return 1 if any(e["status"].startswith("failed") for e in audit) else 0
    return 0


def retain_parser(sub: argparse._SubParsersAction) -> None:
    retain = sub.add_parser("retain", help="print the retention plan; --apply carries it out")
    add_config_args(retain)
    retain.add_argument(
        "--apply",
        action="store_true",
        help="delete / move what the plan lists and write an audit log",
    )
    retain.add_argument("--verbose", action="store_true", help="one line per object")
    retain.add_argument(
        "--export-lifecycle",
        metavar="PATH",
        type=cli_args.file_to_write,
        help="write the policy as S3 lifecycle rules (JSON) where S3 can say it",
    )
    retain.add_argument(
        "--tag-read",
        action="store_true",
        help="tag the S3 objects the runs read, unchanged since, for the exported raw rule",
    )
    retain.set_defaults(func=cmd_retain)


def cmd_report(args: argparse.Namespace) -> int:
    import json

    from pipeline.formats.run_stats import StatsError
    from pipeline.report.build import NoSuchRun, build_report, write_report
    from pipeline.report.html import format_html
    from pipeline.report.markdown import format_markdown
    from pipeline.retention.plan import dataset_location

    cfg = config_from_args(args)
    check_storage(cfg, cfg.output.uri)
    try:
        report = build_report(
            cfg,
            run_id=args.run_id,
            stats_uri=args.stats,
            runs_per_month=args.runs_per_month,
            reader_stats_uri=args.reader_stats,
            epochs_per_month=args.epochs,
            range_bytes=args.range_bytes,
        )
    except StatsError as e:
        print(f"error: stats file rejected: {e}", file=sys.stderr)
        return CONFIG_ERROR
    except NoSuchRun as e:
        print(f"error: {e}", file=sys.stderr)
        return CONFIG_ERROR
    if args.corpus_bytes:  # the same run, at the user's scale: a section of every rendering
        from pipeline.report import bill, dry_run

        corpus = args.corpus_bytes
        try:
            cut, stages = dry_run.plan_for_config(cfg, corpus)
        except dry_run.PlanTooLarge as e:
            print(f"error: --corpus-bytes {corpus:,}: {e}", file=sys.stderr)
            return CONFIG_ERROR
        report["projection"] = bill.projected_bill(
            report,
            corpus,
            stages,
            cut,
            runs_per_month=args.runs_per_month,
            epochs_per_month=args.epochs,
            range_bytes=args.range_bytes,
            prices=cfg.prices,
        )
    print(format_markdown(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    if args.html:
        with open(args.html, "w") as f:
            f.write(format_html(report))
    if args.store:
        for loc in write_report(report, dataset_location(cfg)):
            print(f"stored {loc.uri}")
    return 0


def report_parser(sub: argparse._SubParsersAction) -> None:
    from pipeline.report.build import RANGE_BYTES

    report = sub.add_parser("report", help="cost report: retained vs read, $ per month")
    add_config_args(report)
    report.add_argument(
        "--run-id",
        type=cli_args.utf8_text,
        help="whose _work/<run>/stats.json (default: the run of the newest committed version)",
    )
    report.add_argument(
        "--stats", type=cli_args.existing_file, help="a stage stats JSON file instead"
    )
    report.add_argument(
        "--runs-per-month",
        type=cli_args.non_negative_float,
        default=1.0,
        help="pipeline runs a month, for the monthly request bill (default 1)",
    )
    report.add_argument(
        "--reader-stats",
        type=cli_args.existing_file,
        help="stream-reader counters JSON (training reads)",
    )
    report.add_argument(
        "--epochs",
        type=cli_args.non_negative_float,
        default=1.0,
        help="training epochs per month (default 1; 0: no training reads this month)",
    )
    report.add_argument(
        "--range-bytes",
        type=cli_args.positive_int,
        default=RANGE_BYTES,
        help="range GET size for the training estimate without reader stats",
    )
    report.add_argument(
        "--corpus-bytes",
        type=cli_args.size,
        help="e.g. 10TB: add the projected monthly bill at that input size",
    )
    report.add_argument(
        "--json", metavar="PATH", type=cli_args.file_to_write, help="also write the report as JSON"
    )
    report.add_argument(
        "--html",
        metavar="PATH",
        type=cli_args.file_to_write,
        help="also write a self-contained HTML page",
    )
    report.add_argument(
        "--store", action="store_true", help="store md/json/html under the dataset's _reports/"
    )
    report.set_defaults(func=cmd_report)
