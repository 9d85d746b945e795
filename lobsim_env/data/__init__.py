"""Real market data in: source files (LOBSTER, Binance, Tardis, Databento) ingested once into a cache of days.

- `layout`: the cache (one folder a day: manifest.json, events.npy, book.npy, memory-mapped) and its event kinds;
- `l2book`: the full-depth price-level book the L2 sources are rebuilt with;
- `lobster`, `binance`, `tardis`, `databento`: one module a source, each turning its files into days;
- `python -m lobsim_env.data ingest PATH... --out DIR | check DIR | ls DIR` (docs/data.md).

The market that replays a cache's days is lobsim_env.replay.
"""
