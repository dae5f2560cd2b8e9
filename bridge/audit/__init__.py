"""The audit pipeline on Spark (PySpark): a run folder's event logs in, a report out.

``txbridge audit RUN_DIR`` (``bridge.audit.cli``), ``python -m bridge.audit`` or
``spark-submit bridge/audit/__main__.py``. This package imports only PySpark and the
event-log schema (``bridge.events``), and PySpark only when an audit runs, so importing it
costs nothing. docs/audit.md is the guide.
"""
