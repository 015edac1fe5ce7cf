"""A program's standard streams as CPython gives them when a judge runs `python3 prog.py <input`.

File descriptors 0, 1 and 2 exist for the program, and nothing else does: fd 0 reads the case's
input, as a regular file (a judge's `<input`: `os.fstat(0).st_size` is its length) or as a pipe
(SandboxFusion's: `st_size` is 0, a read returns at most 64 KiB), fds 1 and 2 write
into what the caller gets back as stdout and stderr. Every surface competitive programmers read
and write through reaches them: `input()`, `sys.stdin` and its `.buffer`, `sys.stdin.fileno()`,
`os.read(0, n)`, `open(0)`, `io.open(0, 'rb')`, `os.fdopen(0)`, `print`, `sys.stdout.buffer`,
`os.write(1, b)`, `open(1, 'w')`. The streams are CPython's own classes (`TextIOWrapper` over a
`BufferedReader`/`BufferedWriter`) over a raw stream per descriptor, so buffering, newline
handling and the order of bytes written through different layers are CPython's.

Readers of fd 0 share one position, as they share one open file under CPython. Any other
descriptor, and any path, goes to the functions as they were (WASI with nothing granted: no
files, `EBADF`), so no surface here reaches a file, another case's data or the host.
"""

import builtins
import io
import os

# Bytes a raw read moves at most per call (a buffered layer asks for less); a pipe's capacity.
_CHUNK = 1 << 16
# Where a stream's middle was cut.
MARKER = "...(truncated)..."


def exit_code(e):
    """The process exit code CPython gives a `SystemExit` `e`."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1


class Source:
    """The bytes behind fd 0 and the position every reader of fd 0 shares."""

    def __init__(self, data, pipe=False):
        self.data = data
        self.pos = 0
        self.pipe = pipe

    def take(self, n):
        start = self.pos
        if self.pipe and n >= 0:
            n = min(n, _CHUNK)
        end = len(self.data) if n < 0 else min(len(self.data), start + n)
        self.pos = end
        return self.data[start:end]


class Sink:
    """Bytes written to fd 1 or 2: the first and last `cap / 2` bytes are kept."""

    def __init__(self, cap):
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, b):
        half = self.cap // 2
        self.total += len(b)
        room = half - len(self.head)
        if room > 0:
            self.head += b[:room]
            b = b[room:]
        if b:
            self.tail += b
            keep = self.cap - half
            if len(self.tail) > 2 * keep:
                del self.tail[:-keep]

    @property
    def dropped(self):
        return self.total > self.cap

    def text(self, marker):
        """What was written, decoded as UTF-8 (bytes that are not: U+FFFD), the middle cut."""
        if not self.dropped:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        tail = bytes(self.tail[-(self.cap - self.cap // 2):])
        return bytes(self.head).decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")


class FdIO(io.RawIOBase):
    """fd 0, 1 or 2 as a raw stream (what `io.FileIO(fd)` is under CPython)."""

    def __init__(self, fd, source=None, sink=None, name=None):
        super().__init__()
        self._fd = fd
        self._source = source
        self._sink = sink
        self.name = fd if name is None else name
        self.mode = "rb" if source is not None else "wb"

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def readable(self):
        return self._source is not None

    def writable(self):
        return self._sink is not None

    def seekable(self):
        return False

    def readinto(self, b):
        if self._source is None:
            raise OSError(9, "Bad file descriptor")
        data = self._source.take(min(len(b), _CHUNK))
        b[: len(data)] = data
        return len(data)

    def readall(self):
        if self._source is None:
            raise OSError(9, "Bad file descriptor")
        return self._source.take(-1)

    def write(self, b):
        if self._sink is None:
            raise OSError(9, "Bad file descriptor")
        data = bytes(b)
        self._sink.write(data)
        return len(data)


class Streams:
    """Descriptors 0, 1, 2 for one program run, and the patches that make every surface use
    them. `install()` sets `sys.stdin/stdout/stderr` and the module functions; `finish()`
    flushes what the program left buffered, as CPython does at exit."""

    def __init__(self, stdin_bytes, cap, pipe=False):
        self.source = Source(stdin_bytes, pipe)
        self.out = Sink(cap)
        self.err = Sink(cap)
        self._saved = None

    def raw(self, fd):
        if fd == 0:
            return FdIO(0, source=self.source)
        return FdIO(fd, sink=self.out if fd == 1 else self.err)

    def open_fd(self, fd, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        """`open(fd, ...)` for fd 0, 1 or 2: CPython's layers over the descriptor's raw stream."""
        if not isinstance(mode, str):
            raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
        modes = set(mode)
        if modes - set("rwaxbt+") or len(mode) != len(modes) or ("b" in modes and "t" in modes):
            raise ValueError(f"invalid mode: '{mode}'")
        binary = "b" in modes
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        raw = self.raw(fd)
        raw.mode = mode if binary else mode.replace("t", "") + "b"
        if buffering == 0:
            if not binary:
                raise ValueError("can't have unbuffered text I/O")
            return raw
        size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
        buffered = (io.BufferedReader if fd == 0 else io.BufferedWriter)(raw, size)
        if binary:
            return buffered
        text = io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors,
                                newline=newline, line_buffering=buffering == 1)
        text.mode = mode
        return text

    def install(self, sys):
        """The program's streams and the functions that reach descriptors; returns them."""
        real_open, real_read, real_write = io.open, os.read, os.write
        real_fstat, real_isatty = os.fstat, os.isatty
        self._saved = (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__,
                       sys.__stderr__, real_open, real_read, real_write, real_fstat, real_isatty)
        streams = self

        def open_(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None,
                  closefd=True, opener=None):
            if type(file) is int and 0 <= file <= 2:
                return streams.open_fd(file, mode, buffering, encoding, errors, newline)
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)

        def read(fd, n):
            if type(fd) is int and fd == 0:
                if n < 0:
                    raise ValueError("negative length")
                return streams.source.take(n)
            return real_read(fd, n)

        def write(fd, data):
            if type(fd) is int and fd in (1, 2):
                data = bytes(memoryview(data))
                (streams.out if fd == 1 else streams.err).write(data)
                return len(data)
            return real_write(fd, data)

        def fstat(fd):
            if type(fd) is int and 0 <= fd <= 2:
                # stdin a regular file (a judge's `<input`) or a pipe; the outputs pipes.
                file = fd == 0 and not streams.source.pipe
                size = len(streams.source.data) if file else 0
                mode = 0o100644 if file else 0o010600
                return os.stat_result((mode, 0, 0, 1, 0, 0, size, 0, 0, 0))
            return real_fstat(fd)

        def isatty(fd):
            if type(fd) is int and 0 <= fd <= 2:
                return False
            return real_isatty(fd)

        builtins.open = io.open = open_
        os.read, os.write, os.fstat, os.isatty = read, write, fstat, isatty
        sys.stdin = self.stdin = self.open_fd(0, "r", newline="\n")
        self.stdin.buffer.raw.name = "<stdin>"
        sys.stdout = self.stdout = self.open_fd(1, "w", newline="\n")
        self.stdout.buffer.raw.name = "<stdout>"
        sys.stderr = self.stderr = self.open_fd(2, "w", errors="backslashreplace", newline="\n",
                                                buffering=1)
        self.stderr.buffer.raw.name = "<stderr>"
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        return self

    def finish(self, sys):
        """What CPython does with the streams at exit: flush `sys.stdout` and `sys.stderr` as the
        program left them, then the original streams; errors there are ignored."""
        for stream in (getattr(sys, "stdout", None), getattr(sys, "stderr", None),
                       self.stdout, self.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:  # noqa: BLE001 - a program's stream may raise anything
                pass

    def restore(self, sys):
        if self._saved is None:
            return
        (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__,
         real_open, os.read, os.write, os.fstat, os.isatty) = self._saved
        builtins.open = io.open = real_open
        self._saved = None
