"""Logging of the odradek processes (broker, controller, operator): one set of options for all.

`--log-level` sets the level. `--log-file` sends the log to a file rotated by size, as Kafka's
log4j RollingFileAppender setups do (100 MiB, 10 backups by default, both configurable), instead of
stderr, so a long-running process never fills its disk with one file. Without `--log-file` the log
goes to stderr, where a container runtime or a supervisor collects and rotates it.
"""

import argparse
import logging
import logging.handlers
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUP_COUNT = 10
QUIET_LIBRARIES = ("kazoo",)
"""Libraries whose INFO chatter (every connection attempt) stays out of an INFO log."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LEVELS, help="log level (INFO)")
    parser.add_argument("--log-file", help="write the log to this file, rotated by size, instead of stderr")
    parser.add_argument("--log-file-max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                        help=f"rotate the log file at this size ({DEFAULT_MAX_BYTES})")
    parser.add_argument("--log-file-backups", type=int, default=DEFAULT_BACKUP_COUNT,
                        help=f"rotated log files kept ({DEFAULT_BACKUP_COUNT})")


def handler_for(args: argparse.Namespace) -> logging.Handler:
    if not args.log_file:
        return logging.StreamHandler(sys.stderr)
    if args.log_file_max_bytes <= 0 or args.log_file_backups < 1:
        raise ValueError("--log-file-max-bytes must be positive and --log-file-backups at least 1")
    return logging.handlers.RotatingFileHandler(
        args.log_file, maxBytes=args.log_file_max_bytes, backupCount=args.log_file_backups, encoding="utf-8")


def configure(args: argparse.Namespace, process: str) -> None:
    """Root logging for a process named `process` (it appears in every line) from the options."""
    handler = handler_for(args)
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [{process}] %(name)s: %(message)s"))
    level = getattr(logging, args.log_level)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
