"""The broker node: addresses, queues, consumers, routing."""
