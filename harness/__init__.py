"""What the tests and the benchmarks share to drive the real app: starting `python app.py` and a
server in a thread, Chromium and the page's actions, the soak cycles, and the contract every
backend passes. Nothing here is a test; tests/ and bench/ both import it."""
