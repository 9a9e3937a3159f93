"""The command line's argument parser: argparse's, except that writing --help to a stdout that fails
(`accio --help >/dev/full`) is an error. argparse drops the OSError there, so the help was lost and
the exit status 0; main() reports it as any other failed write to stdout (exit 1)."""
from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    def _print_message(self, message, file=None):
        if message:
            (file or sys.stderr).write(message)
