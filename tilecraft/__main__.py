"""`python -m tilecraft`: the tilecraft command (cli.py)."""
import sys

from .cli import main

sys.exit(main())
