"""One module per ``ddltrace`` verb, each with ``register(subparsers)``; see :mod:`ddltrace.cli`."""
