"""``python -m bridge.audit RUN_DIR`` or ``spark-submit bridge/audit/__main__.py RUN_DIR``:
the audit with the master ``spark-submit`` was given."""

import sys

from bridge.audit.cli import main

if __name__ == "__main__":
    sys.exit(main())
