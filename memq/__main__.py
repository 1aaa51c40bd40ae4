import sys

from memq.cli import main

sys.exit(main())
