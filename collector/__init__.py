"""collector package (filled by later work)."""
