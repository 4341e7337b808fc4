"""What a person sees on the terminal: one logging set-up for every command, and words.

`configure_logging` is called first thing by every command (`imageshards <command>`,
`python -m pipelines.build`, `python -m trainer.task`). Without `--verbose` the terminal shows
this project's own lines only:

- TensorFlow's C++ log (`TF_CPP_MIN_LOG_LEVEL`) is set before anything imports TensorFlow;
- the lines TensorFlow and XLA's C++ code write to the process's stderr before absl's logging
  is initialised (`I0000 ... port.cc] oneDNN custom operations are on`, `E0000 ... failed call
  to cuInit`), which no setting reaches, and what Beam's workers print when the runner's
  logging service has gone (`Logging client failed: ... resetting`), are dropped on their way
  out: file descriptor 2 of this process, and so of every process it starts (Beam's local
  workers), is a pipe read by a thread that forwards every other line;
- the Python loggers of Beam, TensorFlow, absl, Keras and tf.Transform log warnings only,
  and libraries' Python warnings are not shown.
"""

import atexit
import io
import logging
import os
import re
import sys
import threading

OUR_PACKAGES = ('imageshards', 'pipelines', 'trainer', 'bench', '__main__')
_THIRD_PARTY = ('apache_beam', 'absl', 'tensorflow', 'tensorflow_transform', 'keras', 'h5py')
# absl's C++ log line (`I0000 00:00:1795359270.81 9009 port.cc:153] ...`), and its notice that
# lines are written to stderr before InitializeLog. Fatal (F) lines are kept.
_NATIVE_NOISE = re.compile(
    rb'^(?:[IWE]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] |WARNING: All log messages before absl::)'
)
# What a Beam worker prints when the runner's logging service has gone (the runner ended, or
# failed): a line, the gRPC error's lines, and `>... resetting`.
_WORKER_LOGGING_LOST = b'Logging client failed: '
_WORKER_LOGGING_RESET = b'... resetting'
_WORKER_BLOCK_LINES = 20  # were the end of such a block lost, no more than these go
_TRACEBACK = b'Traceback (most recent call last):'
_CHAINED = (b'During handling of the above exception', b'The above exception was the direct')
_FORMAT = '%(asctime)s %(levelname)s %(message)s'
# The exit status of a command stopped by Ctrl-C: 128 + SIGINT, as a shell reports it.
INTERRUPTED_EXIT_CODE = 130
# The exit status of a command that refuses its arguments or input: argparse's own.
REFUSED_EXIT_CODE = 2
_native = None  # the _NativeStderrFilter of this process, once installed


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record is emitted, so that a live progress
    display that redirects sys.stderr shows log lines above itself."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        del value


def configure_logging(verbose=False, filters=(), child_tracebacks=True):
    """Sets up logging and TensorFlow's native log for a command; call before importing TF.

    Args:
        verbose: show everything (INFO from every library, TensorFlow's C++ lines).
        filters: logging.Filters to add to the handler (Beam's worker log lines).
        child_tracebacks: unless `verbose`, whether the Python tracebacks that the processes
            this one starts print are shown (a build's workers print each failure they report
            to the runner, which the build says in its own line).
    """
    if verbose:
        os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0')
    else:
        os.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'
        _filter_native_stderr()
        if _native is not None:
            _native.noise.tracebacks = child_tracebacks
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _CurrentStderr):
            root.removeHandler(handler)
    handler = _CurrentStderr()
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt='%H:%M:%S'))
    for log_filter in filters:
        handler.addFilter(log_filter)
    root.addHandler(handler)
    logging.captureWarnings(True)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    for name in OUR_PACKAGES:
        logging.getLogger(name).setLevel(logging.INFO)
    for name in _THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    # Libraries' Python warnings (Keras' TensorBoard callback warns on every run) are theirs.
    logging.getLogger('py.warnings').setLevel(logging.WARNING if verbose else logging.ERROR)
    return handler


def refuse(command, reason) -> int:
    """Says in one line on stderr why `command` (`imageshards inspect`) cannot go on; returns
    the command's exit status (REFUSED_EXIT_CODE)."""
    print(f'{command}: {reason}', file=sys.stderr)
    return REFUSED_EXIT_CODE


def plural(count, noun, nouns=None):
    """`1 shard`, `3 shards`, `1,797 inputs`: a count and its noun in the right number."""
    word = noun if count == 1 else (nouns or noun + 's')
    return f'{count:,} {word}'


def unconfigure_in_forked_child():
    """In a process forked from one that ran `configure_logging` (the local runner's workers,
    forked from the build's launcher): logging and stderr as a process started anew has them.
    Its Python writes to fd 2 again, which the launcher's filter reads, and its records go only
    where its own code (Beam's worker) sends them, not twice."""
    global _native  # pylint: disable=global-statement
    if _native is not None:  # its thread is not in this process; its copy of the real stderr,
        # held here, would keep a reader of the command's stderr waiting for this process
        sys.stderr.close()
        _native = None
    sys.stderr = sys.__stderr__
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _CurrentStderr):
            root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    for name in (*OUR_PACKAGES, *_THIRD_PARTY, 'py.warnings'):
        logging.getLogger(name).setLevel(logging.NOTSET)
    logging.captureWarnings(False)


def duration(seconds):
    """`4.2 s`, `3 min 07 s`, `2 h 05 min`: an elapsed time as a person reads it."""
    if seconds < 60:
        return f'{seconds:.1f} s'
    minutes, seconds = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f'{minutes} min {seconds:02d} s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours} h {minutes:02d} min'


def stderr_is_terminal():
    """Whether stderr reaches a terminal (also once fd 2 is the filter's pipe)."""
    if _native is not None:
        return _native.terminal
    return sys.stderr.isatty()


class _NativeStderrFilter:
    """Makes fd 2 a pipe whose lines a thread forwards to the real stderr, but for noise.

    Python's own sys.stderr is rebound to the real stderr first: tracebacks, warnings and log
    lines go out directly and in order; only what native code and child processes write to fd
    2 passes the filter.
    """

    def __init__(self):
        self.terminal = os.isatty(2)
        self.noise = _Noise()
        self._real = os.dup(2)
        read, write = os.pipe()
        sys.stderr.flush()
        os.dup2(write, 2)
        os.close(write)
        sys.stderr = io.TextIOWrapper(
            os.fdopen(self._real, 'wb', buffering=0), line_buffering=True, errors='replace'
        )
        self._thread = threading.Thread(target=self._forward, args=(read,), daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _forward(self, read):
        pending = b''
        noise = self.noise
        with os.fdopen(read, 'rb', buffering=0) as pipe:
            while chunk := pipe.read(65536):
                *lines, pending = (pending + chunk).split(b'\n')
                for line in lines:
                    if not noise.drops(line):
                        sys.stderr.write(line.decode('utf-8', 'replace') + '\n')
        if pending and not noise.drops(pending):
            sys.stderr.write(pending.decode('utf-8', 'replace') + '\n')

    def close(self):
        """Gives fd 2 back to the real stderr and lets the thread forward what is left."""
        os.dup2(self._real, 2)  # closes this process's end of the pipe
        self._thread.join(timeout=2)


class _Noise:
    """Tells the lines to drop, one after the other: native log lines, the block a Beam worker
    prints when the runner's logging service is gone, and (`tracebacks`) Python tracebacks,
    chained ones whole."""

    def __init__(self):
        self.tracebacks = True  # shown
        self._block_left = 0  # lines of a worker's block still to come, at most
        self._traceback = None  # in one: 'frames', or 'after' its exception's line

    def drops(self, line):
        if line.startswith(_WORKER_LOGGING_LOST):
            self._block_left = _WORKER_BLOCK_LINES
        if self._block_left:
            ended = line.rstrip().endswith(_WORKER_LOGGING_RESET)
            self._block_left = 0 if ended else self._block_left - 1
            return True
        if not self.tracebacks and self._in_traceback(line):
            return True
        return bool(_NATIVE_NOISE.match(line))

    def _in_traceback(self, line):
        if line.startswith(_TRACEBACK):
            self._traceback = 'frames'
        elif self._traceback == 'frames' and not line[:1].isspace():
            self._traceback = 'after'  # the exception's line
        elif self._traceback == 'after' and line.strip() and not line.startswith(_CHAINED):
            self._traceback = None  # a line of something else
        return self._traceback is not None


def _filter_native_stderr():
    global _native  # pylint: disable=global-statement
    # Not where the caller has replaced sys.stderr (a test harness capturing output).
    if _native is None and sys.stderr is sys.__stderr__ and _fd_is_stderr():
        _native = _NativeStderrFilter()


def _fd_is_stderr():
    try:
        return sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False
