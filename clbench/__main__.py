"""`python -m clbench ...` is the `clbench` command."""
from clbench.cli import main

raise SystemExit(main())
