"""`python -m governor_cli` runs the operator command (the ``governor`` console script's entry)."""

from governor_cli.main import main

raise SystemExit(main())
