"""The benchmark scripts, importable: each runs as `python benchmarks/NAME.py` from the repository root, and the
tests import what they check from here (`from benchmarks import regime_filter`). Importing a script runs none of
its stages: those start under `if __name__ == "__main__"`."""
