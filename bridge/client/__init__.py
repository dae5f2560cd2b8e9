"""The Python client of the core protocol: a Twisted API and a blocking facade."""
