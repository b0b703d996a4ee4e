import sys

from tasks.sim.cli import main

sys.exit(main())
