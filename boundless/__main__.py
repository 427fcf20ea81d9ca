import sys

from boundless.cli import main

sys.exit(main())
