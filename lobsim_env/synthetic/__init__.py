"""The synthetic market: B batched books, a seeded order flow with a planted signal, and the agent in them.

`book` holds the books (integer ticks, price-time priority, the agent's queue place), `flow` draws the crowd's
orders, `agent` turns the agent's actions into orders, and `market.SyntheticMarket` steps all of them as one
`lobsim_env.market.Market`. It never imports the LOBSTER market (tests/test_layout.py). Semantics:
docs/market.md; the book's rules: docs/engine.md.
"""
