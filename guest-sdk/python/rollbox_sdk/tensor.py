"""Tensors with AReaL's dtypes, built from Python lists (or `array` buffers) in the guest and
handed to the host once, when the episode returns (or when the host must combine them, as in
`concat_padded_tensors`).

`tensor(data, dtype=int32)`, `ones(n, dtype=bool_)`, `t.unsqueeze(0)`, `t.tolist()`,
`t.shape`, `t.dtype` behave like their torch namesakes for the shapes workflows build.
"""

from __future__ import annotations

import math

from wit_world.imports import tensor as _wit

from .errors import call


class dtype:  # noqa: N801 - torch's spelling
    """An element type: `int32`, `int64`, `float32`, `bfloat16`, `bool_`, `uint8`."""

    __slots__ = ("name", "wit", "make", "check")

    def __init__(self, name, wit, make, check):
        self.name, self.wit, self.make, self.check = name, wit, make, check

    def __repr__(self):
        return f"rollbox.{self.name}"


def _int_range(lo, hi):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                return None
        return v if lo <= v <= hi else None

    return check


def _float(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def _bool(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    return None


def _bf16(v):
    # bfloat16 crosses as its 16 raw bits; a float is rounded (to nearest even) here.
    if isinstance(v, float):
        import struct

        bits = struct.unpack("<I", struct.pack("<f", v))[0]
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return _int_range(0, 0xFFFF)(v)


int32 = dtype("int32", _wit.Dtype.I32, _wit.TensorData_I32, _int_range(-(2**31), 2**31 - 1))
int64 = dtype("int64", _wit.Dtype.I64, _wit.TensorData_I64, _int_range(-(2**63), 2**63 - 1))
float32 = dtype("float32", _wit.Dtype.F32, _wit.TensorData_F32, _float)
bfloat16 = dtype("bfloat16", _wit.Dtype.BF16, _wit.TensorData_Bf16, _bf16)
bool_ = dtype("bool", _wit.Dtype.BOOL, _wit.TensorData_Bool, _bool)
uint8 = dtype("uint8", _wit.Dtype.U8, _wit.TensorData_U8, _int_range(0, 255))

_BY_WIT = {d.wit: d for d in (int32, int64, float32, bfloat16, bool_, uint8)}


class Tensor:
    """A tensor: flat row-major `data` and a `shape`, or a handle to a host tensor."""

    __slots__ = ("_data", "shape", "dtype", "_host")

    def __init__(self, data, shape, dtype, host=None):
        self._data = data
        self.shape = tuple(shape)
        self.dtype = dtype
        self._host = host

    def numel(self) -> int:
        return math.prod(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def unsqueeze(self, dim: int) -> Tensor:
        """A view with a dimension of size 1 inserted at `dim` (negative counts from the end)."""
        rank = len(self.shape)
        if dim < 0:
            dim += rank + 1
        if not 0 <= dim <= rank:
            raise IndexError(f"unsqueeze dim {dim} is out of range for a {rank}-d tensor")
        shape = self.shape[:dim] + (1,) + self.shape[dim:]
        return Tensor(self._data, shape, self.dtype, self._host)

    def flat(self) -> list:
        """The elements, row-major."""
        if self._data is None:
            self._data = list(self._host.data().value)
        return self._data

    def tolist(self):
        """The elements nested by shape (a number for a 0-d tensor)."""
        data = self.flat()
        if self.dtype is bool_:
            data = [bool(x) for x in data]
        if not self.shape:
            return data[0]

        def nest(flat, shape):
            if len(shape) == 1:
                return list(flat)
            step = len(flat) // shape[0] if shape[0] else 0
            return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

        return nest(data, self.shape)

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs one element, the tensor has {self.numel()}")
        return self.flat()[0]

    def __repr__(self):
        return f"tensor({self.tolist()!r}, dtype={self.dtype!r})"

    def _to_host(self, name: str = "tensor"):
        """The host tensor (created once)."""
        if self._host is not None and self._data is None:
            return self._host
        if self._host is not None and tuple(self._host.shape()) == self.shape:
            return self._host
        data = self.flat()
        payload = bytes(data) if self.dtype is uint8 else data
        try:
            self._host = call(_wit.Tensor.create, self.dtype.make(payload), list(self.shape))
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(f"tensor `{name}` ({self.dtype.name}): {e}") from None
        return self._host


def _flatten(data):
    """Flat elements and shape of a nested list (or a scalar)."""
    if not isinstance(data, (list, tuple)):
        if hasattr(data, "tolist") and not isinstance(data, (str, bytes)):
            data = data.tolist()
            if not isinstance(data, (list, tuple)):
                return [data], ()
        elif isinstance(data, (bytes, bytearray)):
            return list(data), (len(data),)
        else:
            return [data], ()
    if not data or not isinstance(data[0], (list, tuple)):
        return list(data), (len(data),)
    rows = [_flatten(row) for row in data]
    inner = rows[0][1]
    if any(shape != inner for _, shape in rows):
        raise ValueError("tensor(): rows have different lengths")
    return [x for flat, _ in rows for x in flat], (len(rows),) + inner


_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint8": (0, 255)}


_EXACT = {"float32": {float}, "bool": {bool}}
_INT = {int}
_NONE = frozenset()


def _fast(flat: list, dtype: dtype):
    """`flat` itself when every element already has the exact type and range (the common
    case: lists of token ids, masks, logprobs); None to check element by element."""
    kinds = set(map(type, flat))
    if dtype.name in _RANGES:
        lo, hi = _RANGES[dtype.name]
        if kinds <= _INT and (not flat or (lo <= min(flat) and max(flat) <= hi)):
            return flat
    elif kinds <= _EXACT.get(dtype.name, _NONE):
        return flat
    return None


def tensor(data, dtype: dtype | None = None) -> Tensor:
    """A tensor from a number, a (nested) list, a tuple or an `array.array` (torch.tensor)."""
    flat, shape = _flatten(data)
    if dtype is None:
        first = flat[0] if flat else 0.0
        dtype = bool_ if isinstance(first, bool) else int64 if isinstance(first, int) else float32
    fast = _fast(flat, dtype)
    if fast is not None:
        return Tensor(fast, shape, dtype)
    out = []
    for i, v in enumerate(flat):
        x = dtype.check(v)
        if x is None:
            raise TypeError(f"tensor(): element {i} is {v!r}, not a valid {dtype.name} value")
        out.append(x)
    return Tensor(out, shape, dtype)


def ones(n, dtype: dtype = float32) -> Tensor:
    """A 1-d tensor of `n` ones (torch.ones(n, dtype=...))."""
    one = True if dtype is bool_ else 1.0 if dtype in (float32,) else 1
    if dtype is bfloat16:
        one = 0x3F80
    return Tensor([one] * n, (n,), dtype)


def zeros(n, dtype: dtype = float32) -> Tensor:
    """A 1-d tensor of `n` zeros (torch.zeros(n, dtype=...))."""
    zero = False if dtype is bool_ else 0.0 if dtype in (float32,) else 0
    return Tensor([zero] * n, (n,), dtype)


def _from_host(handle) -> Tensor:
    return Tensor(None, tuple(handle.shape()), _BY_WIT[handle.dtype()], handle)


def concat_padded_tensors(tensor_dicts, pad_value: float = 0.0) -> dict:
    """AReaL's `concat_padded_tensors`, run by the host: every dict has the same keys; tensors
    of rank 2 or more are right-padded (`attention_mask` with 0, the others with `pad_value`)
    and joined on dimension 0; rank 0 and 1 tensors are joined."""
    dicts = [[(k, t._to_host(k)) for k, t in d.items()] for d in tensor_dicts]
    merged = call(_wit.concat_padded, dicts, float(pad_value))
    return {k: _from_host(h) for k, h in merged}


def cat(tensors) -> Tensor:
    """Join tensors on dimension 0 (torch.cat)."""
    return _from_host(call(_wit.concat, [t._to_host() for t in tensors]))
