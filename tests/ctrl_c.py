"""Children that a test stops with SIGINT take it as from a terminal's Ctrl-C, whatever the test runner inherited:
a shell's background job (``nohup make test &``) ignores SIGINT, every process it starts ignores it too, and a
Python started that way never raises KeyboardInterrupt."""

import signal


def default_sigint() -> None:
    """``preexec_fn`` of such a child: SIGINT at its default, as Python then sets its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
