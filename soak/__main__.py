import sys

from soak.run import main

sys.exit(main())
