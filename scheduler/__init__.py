"""scheduler package (filled by later work)."""
