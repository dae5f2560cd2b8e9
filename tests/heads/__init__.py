"""Tests of the protocol heads."""
