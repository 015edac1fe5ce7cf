// A GSM8K answer-matching reward written in C, compiled to a rollbox reward component with zig
// (scripts/build-c-reward.sh): the same scoring as the Python and JavaScript rewards
// (workflows/rewards/gsm8k/gsm8k.py, workflows/rewards/gsm8k/gsm8k.js). The prediction is the
// last \boxed{...} (or \fbox{...}), else the first line after the last `####`, else the last
// number of the completion; the reference is the row's `answer` (after its `####` when it has
// one). Both are read as numbers (thousands separators, `a/b`, `\frac{a}{b}`) and compared to
// 6 significant digits: 1.0 when they agree, else 0.0.
//
// No allocation outlives a call (the host gives every call a fresh instance), and every scan
// is bounded by the input's length.

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward.h"
#include "rollbox_json.h"

typedef struct {
  const char *p;
  size_t n;
} span;

static span trim(span s) {
  while (s.n && isspace((unsigned char)s.p[0])) s.p++, s.n--;
  while (s.n && isspace((unsigned char)s.p[s.n - 1])) s.n--;
  return s;
}

static const char *rfind(span s, const char *needle) {
  size_t k = strlen(needle);
  if (k > s.n) return NULL;
  for (size_t i = s.n - k + 1; i-- > 0;)
    if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
  return NULL;
}

// The contents of the last \boxed{...} or \fbox{...}, trimmed; `found` is 0 when there is none
// or it is not closed.
static span last_boxed(span t, int *found) {
  const char *a = rfind(t, "\\boxed{"), *b = rfind(t, "\\fbox{");
  const char *start = a > b ? a : b;
  *found = 0;
  if (!start) return t;
  const char *open = memchr(start, '{', (size_t)(t.p + t.n - start));
  const char *end = t.p + t.n;
  int depth = 1;
  for (const char *c = open + 1; c < end; c++) {
    if (*c == '{') depth++;
    else if (*c == '}' && --depth == 0) {
      *found = 1;
      return trim((span){open + 1, (size_t)(c - open - 1)});
    }
  }
  return t;
}

// `-?\d[\d,]*(\.\d+)?(/\d+)?` at `i` (a digit, or '-' before one): its length.
static size_t number_at(span t, size_t i) {
  size_t k = i;
  if (t.p[k] == '-') k++;
  if (k >= t.n || !isdigit((unsigned char)t.p[k])) return 0;
  while (k < t.n && (isdigit((unsigned char)t.p[k]) || t.p[k] == ',')) k++;
  if (k + 1 < t.n && t.p[k] == '.' && isdigit((unsigned char)t.p[k + 1])) {
    k++;
    while (k < t.n && isdigit((unsigned char)t.p[k])) k++;
  }
  if (k + 1 < t.n && t.p[k] == '/' && isdigit((unsigned char)t.p[k + 1])) {
    k++;
    while (k < t.n && isdigit((unsigned char)t.p[k])) k++;
  }
  return k - i;
}

static int prediction(span c, span *out) {
  int found;
  span boxed = last_boxed(c, &found);
  if (found) {
    *out = boxed;
    return 1;
  }
  const char *hash = rfind(c, "####");
  if (hash) {
    span tail = trim((span){hash + 4, (size_t)(c.p + c.n - hash - 4)});
    if (!tail.n) return 0;
    const char *nl = memchr(tail.p, '\n', tail.n);
    if (nl) tail.n = (size_t)(nl - tail.p);
    if (tail.n && tail.p[tail.n - 1] == '\r') tail.n--;
    *out = tail;
    return 1;
  }
  // The last match of a left-to-right scan, as a regex `findall` finds them.
  int any = 0;
  for (size_t i = 0; i < c.n;) {
    size_t len = (c.p[i] == '-' || isdigit((unsigned char)c.p[i])) ? number_at(c, i) : 0;
    if (len) {
      *out = (span){c.p + i, len};
      any = 1;
      i += len;
    } else {
      i++;
    }
  }
  return any;
}

static int starts(const char *s, size_t n, size_t i, const char *w) {
  size_t k = strlen(w);
  return i + k <= n && memcmp(s + i, w, k) == 0;
}

// `^\(?(-?\d+(\.\d+)?)\)?` at *i: the number's text in `num` (NUL-terminated, bounded).
static int signed_decimal(const char *s, size_t n, size_t *i, char *num, size_t cap) {
  size_t k = *i, start;
  if (k < n && s[k] == '(') k++;
  start = k;
  if (k < n && s[k] == '-') k++;
  if (k >= n || !isdigit((unsigned char)s[k])) return 0;
  while (k < n && isdigit((unsigned char)s[k])) k++;
  if (k + 1 < n && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
    k++;
    while (k < n && isdigit((unsigned char)s[k])) k++;
  } else if (k < n && s[k] == '.') {
    return 0;
  }
  if (k - start >= cap) return 0;
  memcpy(num, s + start, k - start);
  num[k - start] = 0;
  if (k < n && s[k] == ')') k++;
  *i = k;
  return 1;
}

// The number a text stands for; 0 when it is not one.
static int value(span text, double *out) {
  size_t cap = text.n * 2 + 16, n = 0;
  char *a = malloc(cap), *b = malloc(cap);
  int ok = 0;
  if (!a || !b) goto done;
  // Drop `$`, `\left`, `\right`, `\!`; \frac{x}{y} (and \dfrac, \tfrac) -> (x)/(y).
  for (size_t i = 0; i < text.n;) {
    const char *s = text.p;
    if (s[i] == '$') { i++; continue; }
    if (starts(s, text.n, i, "\\left")) { i += 5; continue; }
    if (starts(s, text.n, i, "\\right")) { i += 6; continue; }
    if (starts(s, text.n, i, "\\!")) { i += 2; continue; }
    size_t skip = starts(s, text.n, i, "\\frac{") ? 6
                  : (starts(s, text.n, i, "\\dfrac{") || starts(s, text.n, i, "\\tfrac{")) ? 7
                  : 0;
    if (skip) {
      size_t x = i + skip, xe = x;
      while (xe < text.n && s[xe] != '{' && s[xe] != '}') xe++;
      if (xe + 1 < text.n && s[xe] == '}' && s[xe + 1] == '{') {
        size_t y = xe + 2, ye = y;
        while (ye < text.n && s[ye] != '{' && s[ye] != '}') ye++;
        if (ye < text.n && s[ye] == '}') {
          a[n++] = '(';
          memcpy(a + n, s + x, xe - x), n += xe - x;
          memcpy(a + n, ")/(", 3), n += 3;
          memcpy(a + n, s + y, ye - y), n += ye - y;
          a[n++] = ')';
          i = ye + 1;
          continue;
        }
      }
    }
    a[n++] = s[i++];
  }
  span t = trim((span){a, n});
  while (t.n && t.p[t.n - 1] == '.') t.n--;
  // Spaces out, then thousands separators (a comma between a digit and exactly 3 digits).
  size_t m = 0;
  for (size_t i = 0; i < t.n; i++)
    if (t.p[i] != ' ') b[m++] = t.p[i];
  n = 0;
  for (size_t i = 0; i < m; i++) {
#define D(k) isdigit((unsigned char)b[k])
    // `(?<=\d),(?=\d{3}(?!\d))`
    if (b[i] == ',' && i > 0 && D(i - 1) && i + 3 < m && D(i + 1) && D(i + 2) && D(i + 3) &&
        !(i + 4 < m && D(i + 4)))
#undef D
      continue;
    a[n++] = b[i];
  }
  size_t i = 0;
  char num[64], den[64];
  if (!signed_decimal(a, n, &i, num, sizeof num)) goto done;
  double v = strtod(num, NULL);
  if (i < n) {
    if (a[i] != '/') goto done;
    i++;
    if (!signed_decimal(a, n, &i, den, sizeof den) || i != n) goto done;
    double d = strtod(den, NULL);
    if (d == 0) goto done;
    v /= d;
  }
  *out = v;
  ok = 1;
done:
  free(a);
  free(b);
  return ok;
}

static int same(double a, double b) {
  char x[64], y[64];
  if (a == b) return 1;
  snprintf(x, sizeof x, "%.5e", a);
  snprintf(y, sizeof y, "%.5e", b);
  return strcmp(x, y) == 0;
}

// The row's "answer" as text (malloc'd), from a string or a number; NULL otherwise.
static char *row_answer(span row) {
  rj_span v;
  if (!rj_get((rj_span){row.p, row.n}, "answer", &v)) return NULL;
  if (v.p[0] == '"') return rj_string(v);
  if (v.p[0] != '-' && !isdigit((unsigned char)v.p[0])) return NULL;
  char *out = malloc(v.n + 1);
  if (!out) return NULL;
  memcpy(out, v.p, v.n);
  out[v.n] = 0;
  return out;
}

static double score_text(span completion, span answer) {
  const char *hash = rfind(answer, "####");
  if (hash) answer = trim((span){hash + 4, (size_t)(answer.p + answer.n - hash - 4)});
  span pred;
  if (!prediction(completion, &pred)) return 0.0;
  double a, b;
  if (!value(pred, &a) || !value(answer, &b)) {
    span p = trim(pred), g = trim(answer);
    return p.n && p.n == g.n && memcmp(p.p, g.p, p.n) == 0 ? 1.0 : 0.0;
  }
  return same(a, b) ? 1.0 : 0.0;
}

bool exports_reward_score(reward_reward_input_t *input, double *ret, reward_string_t *err) {
  span data = {(const char *)input->data.ptr, input->data.len};
  span completion = {(const char *)input->completion.ptr, input->completion.len};
  char *answer = row_answer(data);
  if (!answer) {
    static const char msg[] = "the row has no `answer` to check against";
    err->len = sizeof msg - 1;
    err->ptr = malloc(err->len);
    if (err->ptr) memcpy(err->ptr, msg, err->len);
    reward_reward_input_free(input);
    return false;
  }
  *ret = score_text(completion, (span){answer, strlen(answer)});
  free(answer);
  reward_reward_input_free(input);
  return true;
}
