"""Fakes that speak the real protocols; used by tests, benchmarks and the demo; never imported
by production code.

Nothing is re-exported here on purpose: `python -m sandbox.platform` must be able to run the
module as `__main__` without the package having imported it first.
"""
