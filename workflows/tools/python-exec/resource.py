"""`resource` for programs in python-exec, whose WASI build of CPython has none.

Competitive programs call `resource.setrlimit(resource.RLIMIT_STACK, ...)` before a deep
recursion, as on a judge. Limits here are the host's (the tool's memory and time per call), so
`setrlimit` checks its arguments as CPython does and changes nothing, and `getrlimit` reports
every limit as unlimited.
"""

RLIM_INFINITY = -1
RLIMIT_CPU = 0
RLIMIT_FSIZE = 1
RLIMIT_DATA = 2
RLIMIT_STACK = 3
RLIMIT_CORE = 4
RLIMIT_RSS = 5
RLIMIT_NPROC = 6
RLIMIT_NOFILE = 7
RLIMIT_MEMLOCK = 8
RLIMIT_AS = 9
_KNOWN = range(10)

error = OSError


def getrlimit(resource):
    if resource not in _KNOWN:
        raise ValueError("invalid resource specified")
    return (RLIM_INFINITY, RLIM_INFINITY)


def setrlimit(resource, limits):
    if resource not in _KNOWN:
        raise ValueError("invalid resource specified")
    soft, hard = limits
    if not isinstance(soft, int) or not isinstance(hard, int):
        raise TypeError("an integer is required")


def getpagesize():
    return 65536
