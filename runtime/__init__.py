"""What every long-running component needs, below everything else: health and counters
(`health`), retry pacing (`backoff`), the installed version (`version`), total deadlines for
blocking calls (`deadline`) and answers read within a byte bound (`bounded`).

It imports nothing of the agent's own packages; every other package may import it.
"""
