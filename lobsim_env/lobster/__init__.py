"""The LOBSTER market: real NASDAQ days from LOBSTER's files, replayed message by message.

`files` loads and validates one day (message and orderbook files) into integer arrays, `reconstruct` rebuilds
the visible book from the messages and checks it against the orderbook file (`python -m
lobsim_env.lobster.reconstruct PATH --check`), `market` is the agent trading against a replayed day (a
`lobsim_env.market.Market`), `samples` is where LOBSTER's sample days are. `_lobster_fast.c` is the optional
compiled parser and replay loop (built by `pip install -e .` where a C compiler exists; the numpy path gives the
same results). It never imports the synthetic market (tests/test_layout.py). Semantics: docs/lobster.md and
docs/market.md ("LOBSTER replay").
"""
