import sys

from antre.cli import main

sys.exit(main())
