"""Configuration files: TOML in, checked attrs objects out.

Every mistake stops loading with a ConfigError naming the file, the key (a dotted path such
as ``address[1].max-size-bytes``) and what was expected, before anything starts.
"""
