"""Tests of the core protocol packets and their codec."""
