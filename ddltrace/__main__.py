import sys

from ddltrace.cli import main

sys.exit(main())
