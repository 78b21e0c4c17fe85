import sys

from tickd.cli import main

sys.exit(main())
