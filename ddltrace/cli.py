"""The ``ddltrace`` command: ``ddltrace <verb> [args]``.

Each verb is a module in :mod:`ddltrace.commands` with a ``register(subparsers)`` function that adds its
parser and sets ``func`` (called with the parsed arguments, returns the exit code). Verbs are found by
listing that package, so a new verb is a new module and nothing else.

Exit codes: 0 success, 1 the analysis found problems (when asked to fail on them), 2 bad input: one line
naming the file or thing and what is wrong, no traceback (``--debug`` shows it); 130 stopped by Ctrl-C, 143 by
SIGTERM, which every verb but those of :data:`_OWN_SIGTERM` meets as it meets Ctrl-C: its ``with`` blocks and
``finally`` clauses run, so that what it was writing (a staging folder, a temporary store) is removed
(:mod:`ddltrace.interrupts`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
import warnings
from typing import NoReturn

import ddltrace
from ddltrace import commands
from ddltrace.errors import DamagedStoreWarning, DdltraceError, one_line
from ddltrace.interrupts import Terminated, sigterm_unwinds

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
#: The exit code when the standard output could not be written at the end (Python's own for this case).
EXIT_FLUSH_FAILED = 120
#: Verbs whose module has another name (``import`` is a Python keyword); every other verb's module is its name.
_MODULE_OF_VERB = {"import": "import_trace"}
#: Verbs that keep Python's default for SIGTERM: ``run`` handles it itself (it stops the job, then writes the
#: store), and ``workload`` launches the job through ``run``'s launcher (``--trace``) or mpiexec, which an exception
#: in the parent would kill outright (``subprocess.run`` sends SIGKILL), leaving the ranks behind.
_OWN_SIGTERM = frozenset({"run", "workload"})


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors exiting 2 on one line like every other bad input, and the closest verb or
    option named where the word given is a near miss (``analyse``: did you mean 'analyze'?)."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}{_did_you_mean(self, message)} (see --help)\n")


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """``; did you mean ...?`` for an invalid choice (a verb, a subcommand, an option's value) or an unknown option
    close to a known one (difflib's ratio at least 0.6), else ``""``. The options are those of ``parser`` and of
    the subcommands registered under it: with a verb named, only that verb's (:func:`build_parser`)."""
    import difflib
    import re

    choice = re.search(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)$", message)
    if choice:  # the choices quoted (Python 3.11, 3.12) or not (later versions)
        known = re.findall(r"'([^']*)'", choice.group(2)) or [c.strip() for c in choice.group(2).split(",")]
        pairs = [(choice.group(1), known)]
    elif message.startswith("unrecognized arguments: "):
        options = _option_strings(parser)
        pairs = [(word.split("=", 1)[0], options) for word in message.split(": ", 1)[1].split()
                 if word.startswith("--")]
    else:
        return ""
    own = {o for action in parser._actions for o in action.option_strings}
    placed = [word for word, _ in pairs if word in own]  # ddltrace's own option, given after the verb
    if placed:
        return f"; {', '.join(placed)} {'goes' if len(placed) == 1 else 'go'} before the command ('ddltrace " \
            f"{' '.join(placed)} VERB ...')"
    hints = [f"'{close[0]}' for '{word}'" if len(pairs) > 1 else f"'{close[0]}'"
             for word, known in pairs if (close := difflib.get_close_matches(word, known, n=1))]
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """The long options of ``parser`` and of every subcommand parser under it."""
    options = []
    for action in parser._actions:
        options.extend(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options.extend(o for o in _option_strings(sub) if o not in options)
    return options


class _Version(argparse.Action):
    """``--version``: the version (``ddltrace.__version__``)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"ddltrace {ddltrace.__version__}")
        parser.exit()


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The command's parser, with every verb; with ``verb`` (a verb's name) only that verb's module is imported
    and registered (what :func:`main` does when the command line names one: a verb's run does not pay for
    importing the other verbs' modules)."""
    parser = _Parser(
        prog="ddltrace",
        description="Profile distributed deep-learning training and say why it does not scale.",
        epilog="Run 'ddltrace VERB --help' for a verb's options.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    names = sorted(entry[:-3] for entry in os.listdir(commands.__path__[0])
                   if entry.endswith(".py") and not entry.startswith("_"))
    module_name = _MODULE_OF_VERB.get(verb, verb)
    for name in [module_name] if module_name in names else names:
        module = importlib.import_module(f"{commands.__name__}.{name}")
        module.register(subparsers)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning):
    """A damaged part of a store is one ``ddltrace: warning:`` line; other warnings keep Python's form."""
    if issubclass(category, DamagedStoreWarning):
        print(f"ddltrace: warning: {one_line(str(message))}", file=sys.stderr, flush=True)
    else:
        _default(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _show_warning
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((word for word in words if not word.startswith("-")), None))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with contextlib.nullcontext() if args.verb in _OWN_SIGTERM else sigterm_unwinds():
            return int(args.func(args) or 0)
    except DdltraceError as exc:
        if args.debug:
            import traceback  # (2 ms of every start otherwise)

            traceback.print_exc()
        print(f"ddltrace: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated:
        print("ddltrace: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("ddltrace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


class _ReaderMayLeave:
    """A standard stream whose reader may go away (a pipe to ``head``, a closed terminal) or whose file cannot take
    more (a full disk): a write or flush that fails points the stream's descriptor at /dev/null and goes on, so the
    command finishes its work (QA: ``ddltrace run ... | head -n1`` never ran the job, and a run whose pipe broke
    part-way exited 0 without writing its store). A failure other than a reader gone is kept in :attr:`lost`, which
    :func:`end` reports (QA: ``> /dev/full`` ended in a traceback)."""

    def __init__(self, stream):
        self._stream = stream
        #: why output was lost (a full disk, an I/O error), None where it was not
        self.lost: str | None = None

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._to_null(exc)
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._to_null(exc)
            self._stream.flush()

    def _to_null(self, exc: OSError) -> None:
        if not isinstance(exc, BrokenPipeError):
            self.lost = self.lost or exc.strerror or str(exc)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def command() -> None:
    """The ``ddltrace`` command (the console script and ``python -m ddltrace``): :func:`main` on the command line,
    its standard streams kept writable whoever reads them (:class:`_ReaderMayLeave`), then :func:`end`."""
    sys.stdout, sys.stderr = _ReaderMayLeave(sys.stdout), _ReaderMayLeave(sys.stderr)
    end(main())


def end(code: int) -> NoReturn:
    """Exit with ``code`` without tearing the interpreter down: the exit handlers run (a CPU quota's or a disk
    throttle's cgroups removed, logging flushed, temporary folders removed), the standard streams are flushed, and
    the process ends (``os._exit``) without freeing module by module what NumPy, pyarrow and pandas hold: 0.01-0.1 s
    of each command's exit. Where a thread is still running, the exit is Python's own, which waits for it."""
    gc.freeze()  # (the objects left are never collected again: the exit handlers do not walk them)
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()  # what Python's own exit runs first; the rest of its teardown frees memory
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away (| head), or the stream was closed
            pass
        except OSError as exc:  # a full disk or an I/O error: the output is cut, which the exit code must say
            _output_lost(exc.strerror)
    lost = next((s.lost for s in (sys.stdout, sys.stderr) if getattr(s, "lost", None)), None)
    if lost:  # (a write during the command failed: :class:`_ReaderMayLeave` let the command finish)
        _output_lost(lost)
    os._exit(code)


def _output_lost(why: str) -> NoReturn:
    """End saying that the output could not be written (on the terminal's descriptor 2, where it can be)."""
    with contextlib.suppress(OSError):
        os.write(2, f"ddltrace: the output could not be written ({why})\n".encode())
    os._exit(EXIT_FLUSH_FAILED)


if __name__ == "__main__":
    command()
