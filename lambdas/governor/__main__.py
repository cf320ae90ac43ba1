"""`python -m governor` runs the operator command."""

from governor.cli import main

raise SystemExit(main())
