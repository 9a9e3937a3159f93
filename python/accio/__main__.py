"""`python -m accio`: the Python CLI, as the `accio` command (which runs `accio run` natively and
execs this CLI, installed as accio-py, for the rest)."""
import sys

from .cli import main

sys.exit(main())
