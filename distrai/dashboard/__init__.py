"""`distrai dashboard`: a read-only web page of a run, from the store and the chain.

- `reading.py` reads the run's documents (validators' signed reports and aggregates, checked as a
  follower checks them) and the chain, window by window, and remembers what is final;
- `records.py` turns them into the plain records the pages show (pure functions);
- `words.py` says what each check means, in words a miner understands;
- `live.py` refreshes those records in the background and follows the global model's held-out
  loss once per window;
- `server.py` serves the pages and their JSON; `static/` holds the pages, their script and the
  chart, which ship inside the package;
- `cli.py` builds the command's flags and runs the server.
"""
