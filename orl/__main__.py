"""`python -m orl ...` runs the `orl` command (for environments where the script is not on PATH)."""
import sys

from orl.cli import main

sys.exit(main())
