"""Plain values across instances: the type-tagged JSON text the program's instance writes its
results in (`encode`) and a clean instance rebuilds them from (`decode`).

Only data crosses: exact `int`, `float`, `bool`, `None`, `str`, `bytes`, containers of them and
a few standard library types. An object of the program's, or a subclass of a plain type (an
`int` whose `__eq__` always says yes), is refused, and what is read of a value is read with the
base types' own methods, never the object's. Part of python-exec (`assert_cases.py` uses it);
standard library only.
"""

import collections
import decimal
import fractions
import itertools
import json
import types
from json.encoder import encode_basestring_ascii as quote

# A value nested deeper than this is refused (a self-containing list never ends).
MAX_VALUE_DEPTH = 100
# Items read out of an iterator or generator the program returns (an endless one is refused).
MAX_ITERATOR_ITEMS = 1 << 20
# An `int` with more bits is sent as hex (decimal text of it is limited in CPython 3.11+).
MAX_DECIMAL_INT_BITS = 10000

_NAN_INF = ("nan", "inf", "-inf")
_DEFAULT_FACTORIES = {
    "int": int, "float": float, "str": str, "list": list, "dict": dict, "set": set,
    "tuple": tuple, "bool": bool, "bytes": bytes, "frozenset": frozenset,
}
# Types whose contents a call may change in place (a list sorted by the program's function).
MUTABLE = (list, dict, set, bytearray, collections.deque, collections.Counter,
           collections.OrderedDict, collections.defaultdict)
_DICT_KEYS, _DICT_VALUES, _DICT_ITEMS = type({}.keys()), type({}.values()), type({}.items())


def _iterator_types():
    kinds = {types.GeneratorType, map, filter, zip, enumerate, reversed}
    for sample in ([], (), set(), "", b"", {}, {}.keys(), {}.values(), {}.items(), range(1),
                   range(1 << 70)):
        kinds.add(type(iter(sample)))
    kinds.add(type(reversed([])))
    kinds.add(type(reversed(range(1))))
    for name in ("accumulate", "chain", "combinations", "combinations_with_replacement",
                 "compress", "dropwhile", "filterfalse", "islice", "pairwise", "permutations",
                 "product", "starmap", "takewhile", "zip_longest", "count", "cycle", "repeat"):
        kind = getattr(itertools, name, None)
        if isinstance(kind, type):
            kinds.add(kind)
    return frozenset(kinds)


# Iterators whose items are read out (and rebuilt as an iterator over them); captured now, before
# any program runs, as every type here is.
_ITERATORS = _iterator_types()


class Refused(Exception):
    """A value that is not plain data (the text names its type), or one too large or deep."""


def encode(value, cap, canonical=False):
    """`value` as type-tagged JSON text of at most `cap` characters, or `Refused`.

    Plain JSON for exact `int`, `float` (finite), `str`, `bool`, `None` and `list`; an object of
    one key for the rest: `{"tuple": [...]}`, `{"dict": [[k, v], ...]}`, `{"set": [...]}`,
    `{"frozenset": [...]}`, `{"bytes": "hex"}`, `{"bytearray": "hex"}`, `{"float": "nan"}`,
    `{"int": "hex"}`, `{"complex": [re, im]}`, `{"range": [start, stop, step]}`, `{"Fraction":
    [n, d]}`, `{"Decimal": "text"}`, `{"Counter" | "OrderedDict": [[k, v], ...]}`,
    `{"defaultdict": [factory, [[k, v], ...]]}`, `{"deque": [[...], maxlen]}`, `{"dict_keys" |
    "dict_values": [...]}`, `{"dict_items": [[k, v], ...]}`, `{"iter": [...]}` (a generator or
    iterator: its items, read now). Types are compared exactly, so a subclass is refused; the
    contents are read with the base types' own methods, never the object's. `canonical` sorts
    the items of sets and dicts (to compare two encodings)."""
    out = []
    budget = [cap]

    def put(text):
        budget[0] -= len(text)
        if budget[0] < 0:
            raise Refused(f"a value over {cap} characters")
        out.append(text)

    def seq(open_text, items, depth, close_text="]}"):
        if canonical and open_text.startswith(('{"set"', '{"frozenset"', '{"dict_keys"')):
            items = sorted(encode(x, cap, True) for x in items)
            put(open_text + ",".join(items) + close_text)
            return
        put(open_text)
        first = True
        for x in items:
            if not first:
                put(",")
            first = False
            one(x, depth)
        put(close_text)

    def pairs(open_text, items, depth, close_text="]}"):
        if canonical:
            texts = sorted("[" + encode(k, cap, True) + "," + encode(v, cap, True) + "]"
                           for k, v in items)
            put(open_text + ",".join(texts) + close_text)
            return
        put(open_text)
        first = True
        for k, v in items:
            put("[" if first else ",[")
            first = False
            one(k, depth)
            put(",")
            one(v, depth)
            put("]")
        put(close_text)

    def drain(it):
        # Each item takes at least two characters: more than the budget holds is refused early.
        limit = min(MAX_ITERATOR_ITEMS, budget[0] // 2 + 1)
        items = []
        for x in it:
            items.append(x)
            if len(items) > limit:
                raise Refused(f"an iterator of more than {limit} items")
        return items

    def one(v, depth):
        if depth > MAX_VALUE_DEPTH:
            raise Refused(f"a value nested more than {MAX_VALUE_DEPTH} deep")
        depth += 1
        t = type(v)
        if v is None:
            put("null")
        elif t is bool:
            put("true" if v else "false")
        elif t is int:
            if int.bit_length(v) > MAX_DECIMAL_INT_BITS:
                put('{"int":"' + int.__format__(v, "x") + '"}')
            else:
                put(int.__repr__(v))
        elif t is float:
            text = float.__repr__(v)
            put('{"float":"' + text + '"}' if text in _NAN_INF else text)
        elif t is str:
            put(quote(v))
        elif t is list:
            seq("[", list(v), depth, "]")
        elif t is tuple:
            seq('{"tuple":[', tuple.__iter__(v), depth)
        elif t is dict:
            pairs('{"dict":[', list(dict.items(v)), depth)
        elif t is set:
            seq('{"set":[', list(set.__iter__(v)), depth)
        elif t is frozenset:
            seq('{"frozenset":[', list(frozenset.__iter__(v)), depth)
        elif t is bytes:
            put('{"bytes":"' + bytes.hex(v) + '"}')
        elif t is bytearray:
            put('{"bytearray":"' + bytearray.hex(v) + '"}')
        elif t is complex:
            put('{"complex":[')
            one(complex.real.__get__(v), depth)
            put(",")
            one(complex.imag.__get__(v), depth)
            put("]}")
        elif t is range:
            put('{"range":[')
            one(range.start.__get__(v), depth)
            put(",")
            one(range.stop.__get__(v), depth)
            put(",")
            one(range.step.__get__(v), depth)
            put("]}")
        elif t is fractions.Fraction:
            n = object.__getattribute__(v, "_numerator")
            d = object.__getattribute__(v, "_denominator")
            if type(n) is not int or type(d) is not int:
                raise Refused("a Fraction of non-integers")
            put('{"Fraction":[' + int.__repr__(n) + "," + int.__repr__(d) + "]}")
        elif t is decimal.Decimal:
            put('{"Decimal":' + quote(decimal.Decimal.__str__(v)) + "}")
        elif t is collections.Counter:
            pairs('{"Counter":[', list(dict.items(v)), depth)
        elif t is collections.OrderedDict:
            pairs('{"OrderedDict":[', list(collections.OrderedDict.items(v)), depth)
        elif t is collections.defaultdict:
            factory = collections.defaultdict.default_factory.__get__(v)
            names = [k for k, f in _DEFAULT_FACTORIES.items() if f is factory]
            put('{"defaultdict":[' + (quote(names[0]) if names else "null") + ",")
            pairs("[", list(dict.items(v)), depth, "]")
            put("]}")
        elif t is collections.deque:
            put('{"deque":[')
            seq("[", list(collections.deque.__iter__(v)), depth, "]")
            maxlen = collections.deque.maxlen.__get__(v)
            put("," + ("null" if maxlen is None else int.__repr__(maxlen)) + "]}")
        elif t is _DICT_KEYS:
            seq('{"dict_keys":[', list(v), depth)
        elif t is _DICT_VALUES:
            seq('{"dict_values":[', list(v), depth)
        elif t is _DICT_ITEMS:
            pairs('{"dict_items":[', list(v), depth)
        elif t in _ITERATORS:
            seq('{"iter":[', drain(v), depth)
        else:
            raise Refused(_type_name(t))

    try:
        one(value, 0)
    except RecursionError:
        raise Refused("a value nested too deep") from None
    except (RuntimeError, ValueError, TypeError) as e:
        # A container changed while it was read (by a generator of the program's), and the like.
        raise Refused(f"a value that could not be read ({type(e).__name__})") from None
    return "".join(out)


def _type_name(t):
    try:
        return str(type.__getattribute__(t, "__qualname__"))[:100]
    except BaseException:  # noqa: BLE001 - a program's metaclass may do anything
        return "an object"


def decode(text):
    """The value `encode` wrote as `text`; `ValueError` when it is not such a text."""
    return _rebuild(json.loads(text))


def _rebuild(x):
    t = type(x)
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        return [_rebuild(i) for i in x]
    if t is not dict or len(x) != 1:
        raise ValueError("not a type-tagged value")
    ((tag, body),) = x.items()

    def items():
        if type(body) is not list:
            raise ValueError(f"`{tag}` needs a list")
        return [_rebuild(i) for i in body]

    def kv(pairs=None):
        pairs = body if pairs is None else pairs
        if type(pairs) is not list or any(type(p) is not list or len(p) != 2 for p in pairs):
            raise ValueError(f"`{tag}` needs [key, value] pairs")
        return [(_rebuild(k), _rebuild(v)) for k, v in pairs]

    def text():
        if type(body) is not str:
            raise ValueError(f"`{tag}` needs a string")
        return body

    def number(v):
        if type(v) not in (int, float):
            raise ValueError(f"`{tag}` needs numbers")
        return v

    def two():
        if type(body) is not list or len(body) != 2:
            raise ValueError(f"`{tag}` needs two items")
        return body

    try:
        if tag == "tuple":
            return tuple(items())
        if tag == "dict":
            return dict(kv())
        if tag == "set":
            return set(items())
        if tag == "frozenset":
            return frozenset(items())
        if tag == "bytes":
            return bytes.fromhex(text())
        if tag == "bytearray":
            return bytearray.fromhex(text())
        if tag == "float":
            if text() not in _NAN_INF:
                raise ValueError("`float` is nan, inf or -inf")
            return float(body)
        if tag == "int":
            return int(text(), 16)
        if tag == "complex":
            re_, im = two()
            return complex(number(_rebuild(re_)), number(_rebuild(im)))
        if tag == "range":
            if type(body) is not list or len(body) != 3 or any(type(i) is not int for i in body):
                raise ValueError("`range` needs three integers")
            return range(*body)
        if tag == "Fraction":
            n, d = two()
            if type(n) is not int or type(d) is not int:
                raise ValueError("`Fraction` needs two integers")
            return fractions.Fraction(n, d)
        if tag == "Decimal":
            return decimal.Decimal(text())
        if tag == "Counter":
            c = collections.Counter()
            dict.update(c, kv())
            return c
        if tag == "OrderedDict":
            return collections.OrderedDict(kv())
        if tag == "defaultdict":
            name, pairs = two()
            if name is not None and name not in _DEFAULT_FACTORIES:
                raise ValueError("unknown `defaultdict` factory")
            return collections.defaultdict(_DEFAULT_FACTORIES.get(name), kv(pairs))
        if tag == "deque":
            values, maxlen = two()
            if type(values) is not list or not (maxlen is None or type(maxlen) is int):
                raise ValueError("`deque` needs [items, maxlen]")
            return collections.deque([_rebuild(i) for i in values], maxlen)
        if tag == "dict_keys":
            return dict.fromkeys(items()).keys()
        if tag == "dict_values":
            return dict(enumerate(items())).values()
        if tag == "dict_items":
            return dict(kv()).items()
        if tag == "iter":
            return iter(items())
    except (TypeError, ZeroDivisionError, decimal.InvalidOperation, OverflowError) as e:
        raise ValueError(f"`{tag}`: {e}") from None
    raise ValueError(f"unknown tag `{tag}`")


def update_in_place(old, new):
    """Give `old` the contents of `new` when both are the same mutable type (a list the
    program's call sorted in place); else `new`."""
    t = type(old)
    if t is not type(new) or t not in MUTABLE:
        return new
    if t in (list, bytearray):
        old[:] = new
    elif t is collections.deque:
        old.clear()
        old.extend(new)
    elif t is set:
        old.clear()
        old.update(new)
    else:
        dict.clear(old)
        dict.update(old, new)
    return old


class Opaque:
    """Stands for an object of the program's that is not plain data (kept by `r = Cls()` for
    later calls on it): any use of it on the clean side fails the case."""

    __slots__ = ("kind",)

    def __init__(self, kind):
        object.__setattr__(self, "kind", kind)

    def _refuse(self, *args, **kwargs):
        raise TypeError(f"the program's result is {self.kind}, not a plain value")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = _refuse
    __hash__ = __contains__ = __getitem__ = __call__ = __add__ = __radd__ = __index__ = _refuse
    __int__ = __float__ = __str__ = __format__ = __sub__ = __mul__ = __getattr__ = _refuse

    def __repr__(self):
        return f"<the program's {self.kind}>"
