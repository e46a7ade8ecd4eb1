"""`python -m fuser <command>`: see fuser/cli."""
from fuser.cli import main

raise SystemExit(main())
