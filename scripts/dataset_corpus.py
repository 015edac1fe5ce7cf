#!/usr/bin/env python3
"""Write the seed corpus of the dataset-reader fuzz test: tests/fixtures/fuzz/datasets/.

Every file there is replayed through rollbox's dataset reader (host/rollout/src/dataset.rs) and
mutated; each must be refused or read within bounded memory and time. A few are valid datasets
(the mutator's starting points); the rest are hostile: Parquet footers that nest deep or claim
absurd counts, pages that inflate far past what they declare, JSON that nests deep or parses
into far more memory than its size.

    ~/.cache/rollbox/venv-corpus/bin/python scripts/dataset_corpus.py

The venv: python3 -m venv ~/.cache/rollbox/venv-corpus &&
~/.cache/rollbox/venv-corpus/bin/pip install pyarrow==21.0.0 lz4. The hostile files are written
with the standard library alone (Parquet's Thrift compact protocol, the gzip and LZ4-frame
bombs are written by hand); pyarrow writes the valid Parquet files and, with lz4, checks the
output. Without pyarrow the valid files on disk are kept and the checks are skipped. The output
is deterministic (no timestamps or random seeds; gzip headers carry mtime 0). Each writer's
docstring says what its file is for. Sizes: each file <= 1.2 MB, all together <= 3 MB.
"""

import gzip
import json
import struct
import sys
import zlib
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fuzz" / "datasets"
ROWS = [("1 + 1?", "2"), ("2 + 3?", "5"), ("7 - 4?", "3"), ("3 * 3?", "9")]
BOMB_BYTES = 256 << 20  # what the gzip and LZ4 bombs inflate to
SMALL_OBJECTS = 150_000  # json_array_many_small.json (the test builds the 50-million one)
ROW_ZEROS = 200_000  # jsonl_many_values_row.jsonl
GZIP, SNAPPY, LZ4 = 2, 1, 5  # Parquet CompressionCodec

# --- Thrift compact protocol -------------------------------------------------------------------
I32, I64, BIN, LIST, STRUCT = 5, 6, 8, 9, 12


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n):
    return (n << 1) ^ (n >> 63)


def t_value(ty, v):
    if ty in (I32, I64):
        return varint(zigzag(v))
    if ty == BIN:
        b = v.encode() if isinstance(v, str) else v
        return varint(len(b)) + b
    if ty == LIST:
        elem, items = v
        head = bytes([len(items) << 4 | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + varint(len(items))
        return head + b"".join(t_value(elem, x) for x in items)
    if ty == STRUCT:
        return t_struct(v)
    raise ValueError(ty)


def t_struct(fields):
    """fields: (id, type, value) in ascending id order; a None value is left out."""
    out, last = bytearray(), 0
    for fid, ty, val in fields:
        if val is None:
            continue
        delta = fid - last
        if 0 < delta <= 15:
            out.append(delta << 4 | ty)
        else:
            out.append(ty)
            out += varint(zigzag(fid))
        out += t_value(ty, val)
        last = fid
    out.append(0)
    return bytes(out)


# --- Parquet structures ------------------------------------------------------------------------
def schema_element(name, ptype=None, rep=None, num_children=None, converted=None):
    return [(1, I32, ptype), (3, I32, rep), (4, BIN, name), (5, I32, num_children), (6, I32, converted)]


def parquet_file(body, schema, num_rows, row_groups):
    """b"PAR1" + body + FileMetaData + its 4-byte LE length + b"PAR1"."""
    meta = t_struct([(1, I32, 1), (2, LIST, (STRUCT, schema)), (3, I64, num_rows),
                     (4, LIST, (STRUCT, row_groups))])
    return b"PAR1" + body + meta + struct.pack("<I", len(meta)) + b"PAR1"


def one_column_file(codec, payload, uncompressed_page_size):
    """One row group, one REQUIRED BYTE_ARRAY (UTF8) column `question`, one v1 data page of one
    value compressed with `codec` (payload already compressed), declaring
    `uncompressed_page_size`; the column's total_uncompressed_size is header + that size."""
    page = t_struct([(1, I32, 0), (2, I32, uncompressed_page_size), (3, I32, len(payload)),
                     (5, STRUCT, [(1, I32, 1), (2, I32, 0), (3, I32, 3), (4, I32, 3)])])
    chunk = page + payload
    meta = [(1, I32, 6), (2, LIST, (I32, [0, 3])), (3, LIST, (BIN, ["question"])), (4, I32, codec),
            (5, I64, 1), (6, I64, len(page) + uncompressed_page_size), (7, I64, len(chunk)), (9, I64, 4)]
    column = [(2, I64, 4), (3, STRUCT, meta)]
    row_group = [(1, LIST, (STRUCT, [column])), (2, I64, len(page) + uncompressed_page_size), (3, I64, 1)]
    schema = [schema_element("schema", num_children=1), schema_element("question", 6, 0, converted=0)]
    return parquet_file(chunk, schema, 1, [row_group])


def deep_schema_file(depth):
    """Root, depth-1 OPTIONAL groups of one child each, an OPTIONAL INT32 leaf: nesting `depth`."""
    schema = [schema_element("schema", num_children=1)]
    schema += [schema_element("g", rep=1, num_children=1)] * (depth - 1)
    schema.append(schema_element("x", 1, 1))
    return parquet_file(b"", schema, 0, [])


# --- Compression, by hand ----------------------------------------------------------------------
def gzip_zeros(n):
    """n zero bytes as one gzip member (level 9: ~1/1030 of n)."""
    z, chunk, out = zlib.compressobj(9, zlib.DEFLATED, 31), bytes(1 << 20), bytearray()
    for _ in range(n // len(chunk)):
        out += z.compress(chunk)
    return bytes(out + z.compress(bytes(n % len(chunk))) + z.flush())


def xxh32(data, seed=0):
    p1, p2, p3, p4, p5, m = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF
    assert len(data) < 16
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m
    h, i = (seed + p5 + len(data)) & m, 0
    while i + 4 <= len(data):
        h = rotl((h + struct.unpack_from("<I", data, i)[0] * p3) & m, 17) * p4 & m
        i += 4
    for b in data[i:]:
        h = rotl((h + b * p5) & m, 11) * p1 & m
    h = (h ^ (h >> 15)) * p2 & m
    h = (h ^ (h >> 13)) * p3 & m
    return h ^ (h >> 16)


def lz4_frame_zeros(n):
    """n zero bytes as an LZ4 frame (magic 0x184D2204, independent 4 MiB blocks, no checksums).
    Each block: one literal 0, a match at offset 1 over all but the last 5 bytes, 5 literal 0s
    (LZ4 caps a match's length at ~255 per byte, so this is ~1/255 of n)."""
    block_size = 4 << 20
    assert n % block_size == 0
    match = block_size - 1 - 5
    ml = match - 4 - 15
    seq = bytes([0x1F, 0]) + struct.pack("<H", 1) + b"\xff" * (ml // 255) + bytes([ml % 255])
    block = seq + bytes([0x50]) + bytes(5)
    descriptor = bytes([0x60, 0x70])  # version 01, block independence; 4 MiB max block size
    header = struct.pack("<I", 0x184D2204) + descriptor + bytes([xxh32(descriptor) >> 8 & 0xFF])
    blocks = (struct.pack("<I", len(block)) + block) * (n // block_size)
    return header + blocks + bytes(4)


def snappy_literal(data):
    """Raw snappy: the uncompressed length, then one literal (data shorter than 61 bytes)."""
    assert 0 < len(data) <= 60
    return varint(len(data)) + bytes([(len(data) - 1) << 2]) + data


# --- The files ---------------------------------------------------------------------------------
def plain(value):
    """A PLAIN BYTE_ARRAY value: 4-byte LE length, then the bytes."""
    return struct.pack("<I", len(value)) + value


def hostile_parquet():
    files = {
        # 10,000 levels of nesting in the footer's flat schema list (a recursive schema builder
        # would overflow the stack).
        "parquet_deep_schema.parquet": deep_schema_file(10_000),
        # A root claiming 2,000,000,000 children with one element after it.
        "parquet_2b_children.parquet": parquet_file(b"", [schema_element("schema", num_children=2_000_000_000),
                                                          schema_element("x", 1, 1)], 0, []),
        # Footer length 0x7FFFFFFF in a 16-byte file.
        "parquet_footer_huge_len.parquet": b"PAR1" + bytes(4) + struct.pack("<I", 0x7FFFFFFF) + b"PAR1",
        # The honest twin of the bombs, same writer: one row {"question": "hello"}, gzip.
        "hand_valid_gzip.parquet": one_column_file(GZIP, gzip.compress(plain(b"hello"), mtime=0), 9),
        # A page declaring 1000 bytes whose gzip payload inflates to 256 MiB of zeros.
        "parquet_gzip_bomb.parquet": one_column_file(GZIP, gzip_zeros(BOMB_BYTES), 1000),
        # A 9-byte snappy page declaring uncompressed_page_size 2,000,000,000 (an allocation
        # sized by the header).
        "parquet_snappy_huge_declared.parquet": one_column_file(SNAPPY, snappy_literal(plain(b"hello")),
                                                                2_000_000_000),
        # A page declaring 1000 bytes whose LZ4 frame inflates to 256 MiB of zeros (codec LZ4=5;
        # readers try Hadoop framing, then a frame, then a raw block).
        "parquet_lz4_bomb.parquet": one_column_file(LZ4, lz4_frame_zeros(BOMB_BYTES), 1000),
    }
    for name, data in files.items():
        write(name, data)
    # The first 60% of a valid file plus its last 8 bytes (footer length and magic): the length
    # points at bytes that are not a footer.
    valid = (OUT / "valid_snappy.parquet").read_bytes()
    write("parquet_truncated.parquet", valid[: len(valid) * 6 // 10] + valid[-8:])


def hostile_json():
    nested = "[" * 100_000 + "]" * 100_000
    files = {
        # A line of 100,000 `[`: recursion depth.
        "json_deep.jsonl": "[" * 100_000 + "\n",
        # 50,000 nested objects, closed: recursion depth on a well-formed row.
        "json_deep_object.jsonl": '{"a":' * 50_000 + "1" + "}" * 50_000 + "\n",
        # Many tiny elements: a small version of the 50-million-object array (the parsed form is
        # many times the text).
        "json_array_many_small.json": "[" + ",".join(["{}"] * SMALL_OBJECTS) + "]",
        # An array whose second element nests 100,000 deep between two good rows.
        "json_array_deep_element.json": '[{"q":1}, ' + nested + ', {"q":2}]',
        # One row under the 16 MiB line cap whose parsed form is many times its size.
        "jsonl_many_values_row.jsonl": '{"xs":[' + ",".join(["0"] * ROW_ZEROS) + "]}\n",
        # An array without its closing bracket; an array followed by another value.
        "json_array_unterminated.json": '[{"q":1},{"q":2}',
        "json_array_trailing.json": '[{"q":1}] {"q":2}',
        # Valid: JSONL rows; a JSON array of 3 objects after leading whitespace.
        "valid.jsonl": "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in ROWS[:3]),
        "valid_array.json": " \n\t\n  " + json.dumps([{"question": q, "answer": a} for q, a in ROWS[:3]],
                                                     indent=1) + "\n",
    }
    for name, text in files.items():
        write(name, text.encode())


def valid_parquet(pa, pq):
    """Four rows in two row groups: question, answer (string), prompt (list<struct<role,
    content>>, verl's chat layout), index (int64); one file per codec."""
    schema = pa.schema([("question", pa.string()), ("answer", pa.string()),
                        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
                        ("index", pa.int64())])
    rows = [{"question": q, "answer": a, "prompt": [{"role": "user", "content": q}], "index": i}
            for i, (q, a) in enumerate(ROWS)]
    table = pa.Table.from_pylist(rows, schema=schema)
    for codec in ("snappy", "gzip", "zstd", "none"):
        path = OUT / f"valid_{'uncompressed' if codec == 'none' else codec}.parquet"
        pq.write_table(table, path, compression=codec, row_group_size=2)
        print(f"{path.name}: {path.stat().st_size} bytes")
    return rows


def write(name, data):
    (OUT / name).write_bytes(data)
    print(f"{name}: {len(data)} bytes")


# --- Checks ------------------------------------------------------------------------------------
def check(pa, pq, rows):
    for codec in ("snappy", "gzip", "zstd", "uncompressed"):
        table = pq.read_table(OUT / f"valid_{codec}.parquet")
        assert table.to_pylist() == rows and pq.ParquetFile(OUT / f"valid_{codec}.parquet").num_row_groups == 2
    got = pq.read_table(OUT / "hand_valid_gzip.parquet").to_pylist()
    assert got == [{"question": "hello"}], got
    meta = pq.ParquetFile(OUT / "parquet_gzip_bomb.parquet").metadata  # metadata only
    assert (meta.num_rows, meta.num_row_groups, meta.row_group(0).column(0).compression) == (1, 1, "GZIP")
    # pyarrow names the deprecated LZ4 codec (5, Hadoop-or-frame) UNKNOWN.
    for name, codec in (("parquet_snappy_huge_declared", "SNAPPY"), ("parquet_lz4_bomb", "UNKNOWN")):
        assert pq.ParquetFile(OUT / f"{name}.parquet").metadata.row_group(0).column(0).compression == codec
    # The deep-schema writer at a depth pyarrow takes: root > g > g > g > x.
    small = OUT / "_deep4.parquet"
    small.write_bytes(deep_schema_file(4))
    try:
        assert str(pq.ParquetFile(small).schema_arrow.field(0).type) == "struct<g: struct<g: struct<x: int32>>>"
    finally:
        small.unlink()
    # Payloads: the gzip bomb inflates to BOMB_BYTES of zeros (streamed), so does the LZ4 one.
    d, total = zlib.decompressobj(31), 0
    data = gzip_zeros(BOMB_BYTES)
    for i in range(0, len(data), 1 << 16):
        part = d.decompress(data[i:i + (1 << 16)])
        assert not part.strip(b"\0")
        total += len(part)
    assert total == BOMB_BYTES and d.eof
    try:
        import lz4.frame
    except ImportError:
        print("lz4 not installed: the LZ4 frame is not checked")
    else:
        assert lz4.frame.decompress(lz4_frame_zeros(BOMB_BYTES)) == bytes(BOMB_BYTES)
        assert lz4.frame.decompress(lz4_frame_zeros(4 << 20)) == bytes(4 << 20)
    for name in ("json_array_many_small.json", "json_array_deep_element.json", "jsonl_many_values_row.jsonl",
                 "valid.jsonl", "valid_array.json", "json_deep_object.jsonl"):
        text = (OUT / name).read_text()
        try:
            for value in text.splitlines() if name.endswith(".jsonl") else [text]:
                json.loads(value)
        except RecursionError:
            assert "deep" in name  # well-formed, but deeper than Python's parser goes
    print("checks passed")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pa = pq = None
        print("pyarrow not installed: the valid Parquet files on disk are kept, nothing is checked")
    rows = valid_parquet(pa, pq) if pa else None
    hostile_parquet()
    hostile_json()
    sizes = [p.stat().st_size for p in OUT.iterdir()]
    print(f"{len(sizes)} files, {sum(sizes)} bytes, largest {max(sizes)}")
    assert max(sizes) <= 1_200_000 and sum(sizes) <= 3_000_000
    if pa:
        check(pa, pq, rows)


if __name__ == "__main__":
    sys.exit(main())
