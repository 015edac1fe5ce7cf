"""`threading` for programs in an instance that has one thread (CPython's WASI build starts none:
`can't start new thread`).

Competitive programs start a thread for one reason: to run `main` on a bigger stack
(`threading.stack_size(1 << 27)`, `Thread(target=main).start()`, `join()`). Here `start()` runs
the thread's `run()` to its end at once, in the instance's one thread, and `join()` and
`is_alive()` answer as for a thread that has ended. As under CPython, an exception in the thread
is reported on stderr by `threading.excepthook` and the program goes on, and a `SystemExit` in it
ends only the thread. Threads that wait on each other (a producer and a consumer on a `Queue`)
cannot be run this way: the first to block waits for ever, and the case ends at its timeout.
"""

import threading


def _start(self):
    if not self._initialized:
        raise RuntimeError("thread.__init__() not called")
    if self._started.is_set():
        raise RuntimeError("threads can only be started once")
    self._started.set()
    self._rollbox_done = False
    try:
        self.run()
    except SystemExit:
        pass
    except BaseException as e:  # noqa: BLE001 - reported as CPython reports a thread's error
        try:
            threading.excepthook(threading.ExceptHookArgs((type(e), e, e.__traceback__, self)))
        except BaseException:  # noqa: BLE001 - a program's hook may raise too
            pass
    finally:
        self._rollbox_done = True


def _join(self, timeout=None):
    if not self._initialized:
        raise RuntimeError("Thread.__init__() not called")
    if not self._started.is_set():
        raise RuntimeError("cannot join thread before it is started")


def _is_alive(self):
    return self._started.is_set() and not getattr(self, "_rollbox_done", True)


threading.Thread.start = _start
threading.Thread.join = _join
threading.Thread.is_alive = _is_alive
