"""Protocol heads: each turns one wire protocol into calls on the node's broker."""
