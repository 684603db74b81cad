"""Runs only when `python -m clbench` is started in the folder that *holds* a checkout named clbench/:
Python then imports the checkout folder itself as an empty namespace package instead of the
installed clbench, and nothing would work. Say so, and what to do."""
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.exit(f"clbench: `python -m clbench` was run from {Path.cwd()}, the folder that holds the clbench checkout "
         f"{here}, so Python imported the checkout folder instead of the clbench package.\n"
         f"Run it from any other folder (e.g. `cd {here}`), or use the `clbench` command; "
         f"install first with `pip install -e {here}` if you have not.")
