// rollbox_json.h: the little JSON reading and writing a C component needs for rollbox's
// JSON-carrying fields (the row, the config, chat messages, metadata). Header-only; every
// scan is bounded by the input's length; nothing is kept between calls.
//
//   rj_span row = {ptr, len};
//   rj_span msgs;           // the raw JSON text of a top-level key's value
//   if (rj_get(row, "messages", &msgs)) ...
//   char *text = rj_string(value);   // a JSON string value decoded (malloc'd), or NULL
//   rj_buf out = {0}; rj_put_string(&out, "a \"quoted\" text", n);  // JSON-encoded, appended
#ifndef ROLLBOX_JSON_H
#define ROLLBOX_JSON_H

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *p;
  size_t n;
} rj_span;

static inline rj_span rj_trim(rj_span s) {
  while (s.n && isspace((unsigned char)s.p[0])) s.p++, s.n--;
  while (s.n && isspace((unsigned char)s.p[s.n - 1])) s.n--;
  return s;
}

static inline size_t rj_ws(rj_span j, size_t i) {
  while (i < j.n && isspace((unsigned char)j.p[i])) i++;
  return i;
}

// The end of the JSON string starting at i (its opening quote); 0 when unterminated.
static inline size_t rj_string_end(rj_span j, size_t i) {
  for (i++; i < j.n; i++) {
    if (j.p[i] == '\\') i++;
    else if (j.p[i] == '"') return i + 1;
  }
  return 0;
}

// The end of the JSON value at i (after leading space); 0 when malformed.
static inline size_t rj_value_end(rj_span j, size_t i) {
  i = rj_ws(j, i);
  if (i >= j.n) return 0;
  if (j.p[i] == '"') return rj_string_end(j, i);
  if (j.p[i] == '{' || j.p[i] == '[') {
    size_t depth = 0;
    for (; i < j.n; i++) {
      if (j.p[i] == '"') {
        i = rj_string_end(j, i);
        if (!i) return 0;
        i--;
      } else if (j.p[i] == '{' || j.p[i] == '[') {
        depth++;
      } else if ((j.p[i] == '}' || j.p[i] == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return 0;
  }
  size_t start = i;
  while (i < j.n && !strchr(",}] \t\r\n", j.p[i])) i++;
  return i > start ? i : 0;
}

// Decode the JSON string `s` (with its quotes) into a malloc'd NUL-terminated text (*len
// bytes); NULL when `s` is not a string. \uXXXX escapes become UTF-8 (surrogate pairs joined).
static inline char *rj_string_n(rj_span s, size_t *len) {
  s = rj_trim(s);
  if (s.n < 2 || s.p[0] != '"' || s.p[s.n - 1] != '"') return NULL;
  char *out = malloc(s.n * 2 + 1);
  size_t n = 0;
  if (!out) return NULL;
  for (size_t i = 1; i + 1 < s.n; i++) {
    char c = s.p[i];
    if (c != '\\') {
      out[n++] = c;
      continue;
    }
    if (++i + 1 >= s.n + 1) break;
    switch (s.p[i]) {
      case 'n': out[n++] = '\n'; break;
      case 't': out[n++] = '\t'; break;
      case 'r': out[n++] = '\r'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'u': {
        unsigned long u = 0;
        for (int k = 1; k <= 4 && i + k < s.n; k++) {
          char h = s.p[i + k];
          u = u * 16 + (unsigned long)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
        }
        i += 4;
        if (u >= 0xD800 && u < 0xDC00 && i + 6 < s.n && s.p[i + 1] == '\\' && s.p[i + 2] == 'u') {
          unsigned long lo = 0;
          for (int k = 3; k <= 6; k++) {
            char h = s.p[i + k];
            lo = lo * 16 + (unsigned long)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
          }
          u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        }
        if (u < 0x80) {
          out[n++] = (char)u;
        } else if (u < 0x800) {
          out[n++] = (char)(0xC0 | (u >> 6));
          out[n++] = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
          out[n++] = (char)(0xE0 | (u >> 12));
          out[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
          out[n++] = (char)(0x80 | (u & 0x3F));
        } else {
          out[n++] = (char)(0xF0 | (u >> 18));
          out[n++] = (char)(0x80 | ((u >> 12) & 0x3F));
          out[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
          out[n++] = (char)(0x80 | (u & 0x3F));
        }
        break;
      }
      default: out[n++] = s.p[i];
    }
  }
  out[n] = 0;
  if (len) *len = n;
  return out;
}

static inline char *rj_string(rj_span s) { return rj_string_n(s, NULL); }

// The raw value of `key` in the JSON object `obj` (top level only); 0 when absent or when
// `obj` is not an object. A `null` value counts as absent.
static inline int rj_get(rj_span obj, const char *key, rj_span *value) {
  size_t i = rj_ws(obj, 0), klen = strlen(key);
  if (i >= obj.n || obj.p[i] != '{') return 0;
  i = rj_ws(obj, i + 1);
  if (i < obj.n && obj.p[i] == '}') return 0;
  while (i < obj.n && obj.p[i] == '"') {
    size_t kend = rj_string_end(obj, i);
    if (!kend) return 0;
    size_t dlen = 0;
    char *k = rj_string_n((rj_span){obj.p + i, kend - i}, &dlen);
    int match = k && dlen == klen && memcmp(k, key, klen) == 0;
    free(k);
    i = rj_ws(obj, kend);
    if (i >= obj.n || obj.p[i] != ':') return 0;
    size_t vstart = rj_ws(obj, i + 1), vend = rj_value_end(obj, vstart);
    if (!vend) return 0;
    if (match) {
      *value = (rj_span){obj.p + vstart, vend - vstart};
      return !(value->n == 4 && memcmp(value->p, "null", 4) == 0);
    }
    i = rj_ws(obj, vend);
    if (i < obj.n && obj.p[i] == ',') i = rj_ws(obj, i + 1);
    else return 0;
  }
  return 0;
}

// A growable output buffer.
typedef struct {
  char *p;
  size_t n, cap;
} rj_buf;

static inline void rj_put(rj_buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) abort();
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static inline void rj_puts(rj_buf *b, const char *s) { rj_put(b, s, strlen(s)); }

// `s` as a JSON string (quotes and escapes), appended.
static inline void rj_put_string(rj_buf *b, const char *s, size_t n) {
  rj_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      rj_put(b, esc, 2);
    } else if (c == '\n' || c == '\t' || c == '\r') {
      esc[0] = '\\', esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
      rj_put(b, esc, 2);
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      memcpy(esc, "\\u00", 4);
      esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
      rj_put(b, esc, 6);
    } else {
      rj_put(b, (const char *)&s[i], 1);
    }
  }
  rj_put(b, "\"", 1);
}

#endif
