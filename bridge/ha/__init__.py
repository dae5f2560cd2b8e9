"""High availability: the live lease in the shared database, and the activation of a node
that holds it (docs/ha.md)."""
