//! math-verify's normalisation of a LaTeX answer: box extraction, basic LaTeX clean-up, units,
//! nits and malformed operators.

use super::env::text;
use crate::mv::scan::{at, digit, starts, ws};

/// Box extraction: the contents of the boxes, right to left; `last`: only the last box and
/// boxes close to it (math-verify's "last" mode); else every box.
fn extract_boxes(s: &str, last: bool) -> String {
    if !s.contains("\\boxed") && !s.contains("\\fbox") {
        return s.to_string();
    }
    let t: Vec<char> = crate::mv::chars(s);
    let mut collected: Vec<String> = Vec::new();
    let mut limit = t.len();
    let mut prev: Option<(usize, String)> = None;
    loop {
        // The rightmost \boxed or \fbox starting before `limit`.
        let mut found = None;
        for i in (0..limit).rev() {
            if starts(&t, i, "\\boxed") {
                found = Some((i, i + 6));
                break;
            }
            if starts(&t, i, "\\fbox") {
                found = Some((i, i + 5));
                break;
            }
        }
        let Some((cmd, mut k)) = found else { break };
        while at(&t, k).is_some_and(ws) {
            k += 1;
        }
        let unclosed = |collected: &mut Vec<String>, from: usize| {
            if collected.is_empty() {
                collected.push(text(&t, from.min(limit), limit));
            }
        };
        if at(&t, k) != Some('{') {
            unclosed(&mut collected, k);
            break;
        }
        let mut depth = 0i32;
        let mut close = None;
        let mut i = k;
        while i < limit {
            match t[i] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        let Some(close) = close else {
            unclosed(&mut collected, k);
            break;
        };
        let content = text(&t, k + 1, close).trim().to_string();
        if last && let Some((pstart, pcontent)) = &prev {
            let between = text(&t, close + 1, *pstart);
            let n = between.chars().count();
            let joined = ["and", "or", ",", ";"].iter().any(|w| between.contains(w));
            if !(n < 10 || (n < 70 && joined && &content != pcontent)) {
                break;
            }
        }
        collected.insert(0, content.clone());
        prev = Some((cmd, content));
        limit = cmd;
    }
    if collected.is_empty() {
        return s.to_string();
    }
    collected.join(",")
}

const UNITS: &[&str] = &[
    "integerpoint",
    "feet",
    "sue",
    "digit",
    "pound",
    "meal",
    "edge",
    "student",
    "children ticket",
    "multiple",
    "east",
    "degree",
    "mph",
    "kmph",
    "ft",
    "m square",
    " m east",
    "sq m",
    "deg",
    "mile",
    "q .",
    "monkey",
    "prime",
    "ratio",
    "profit of rs",
    "rd",
    "o",
    "gm",
    "p . m",
    "lb",
    "tile",
    "per",
    "dm",
    "lt",
    "gain",
    "ab",
    "way",
    "west",
    "a .",
    "b .",
    "c .",
    "d .",
    "e .",
    "f .",
    "g .",
    "h .",
    "t",
    "h",
    "no change",
    "men",
    "soldier",
    "pie",
    "bc",
    "excess",
    "st",
    "inches",
    "noon",
    "cent",
    "by",
    "gal",
    "kmh",
    "c",
    "acre",
    "rise",
    "a . m",
    "th",
    "π r 2",
    "sq",
    "mark",
    "l",
    "toy",
    "coin",
    "sq . m",
    "gallon",
    "° f",
    "profit",
    "minw",
    "yr",
    "women",
    "am",
    "pm",
    "hr",
    "cu cm",
    "square",
    "v â € ™",
    "are",
    "rupee",
    "rounds",
    "cubic",
    "cc",
    "mtr",
    "s",
    "ohm",
    "number",
    "day",
    "hour",
    "minute",
    "min",
    "second",
    "man",
    "woman",
    "sec",
    "cube",
    "mt",
    "sq inch",
    "mp",
    "∏ cm ³",
    "hectare",
    "more",
    "unit",
    "cu . m",
    "cm 2",
    "rs .",
    "rs",
    "kg",
    "g",
    "month",
    "km",
    "m",
    "cm",
    "mm",
    "apple",
    "liter",
    "loss",
    "yard",
    "pure",
    "year",
    "increase",
    "decrease",
    "d",
    "less",
    "Surface",
    "litre",
    "pi sq m",
    "s .",
    "metre",
    "meter",
    "inch",
];

/// Remove one trailing unit word (preceded, after optional spaces, by a digit, `}` or
/// whitespace, which is kept); `None` if there is none or nothing would be left. Of several
/// matches the one starting leftmost wins, as a regex search finds it.
fn strip_unit(s: &str) -> Option<String> {
    let body = s.trim_end_matches(|c: char| c.is_whitespace());
    // Most answers end in a digit or a brace: no unit can end there.
    let last = body.chars().next_back()?;
    if last != 's' && !UNITS.iter().any(|u| u.ends_with(last)) {
        return None;
    }
    let mut best: Option<usize> = None;
    let bytes = body.as_bytes();
    for u in UNITS {
        let ub = u.as_bytes();
        for suffix in ["", "s", "es"] {
            // `body` ends with `u` + `suffix`: compared byte by byte (short words; a library
            // comparison per candidate cost more than the scan).
            let n = ub.len() + suffix.len();
            if bytes.len() < n
                || !bytes[bytes.len() - suffix.len()..]
                    .iter()
                    .eq(suffix.as_bytes())
                || !bytes[bytes.len() - n..bytes.len() - suffix.len()]
                    .iter()
                    .eq(ub)
            {
                continue;
            }
            let stem = &body[..body.len() - n];
            // `\s*` before the word: back over spaces to the kept character.
            let kept = stem.trim_end_matches(|c: char| c.is_whitespace());
            let start = if kept.len() < stem.len() {
                // A whitespace character may itself be the kept one.
                kept.len() + stem[kept.len()..].chars().next().map_or(0, char::len_utf8)
            } else {
                stem.len()
            };
            let before = s[..start].chars().next_back();
            let ok = before.is_some_and(|c| digit(c) || c == '}' || ws(c));
            if ok && !s[..start].trim().is_empty() && best.is_none_or(|b| start < b) {
                best = Some(start);
            }
        }
    }
    best.map(|b| s[..b].to_string())
}

/// math-verify's normalisation of a LaTeX answer (basic LaTeX, units, nits, malformed
/// operators), with box extraction first (`last`: the plain-boxed candidate's mode).
pub(crate) fn normalize(s: &str, last: bool) -> String {
    let mut s = extract_boxes(s, last);
    // The characters that follow a backslash: a command pattern is looked for only when its
    // first letter is among them (most answers hold a few commands, the list ~30).
    let mut after_bs: Vec<char> = Vec::new();
    let mut prev = ' ';
    for c in s.chars() {
        if prev == '\\' && !after_bs.contains(&c) {
            after_bs.push(c);
        }
        prev = c;
    }
    let may_hold = |a: &str, s: &str, after_bs: &[char]| match a.strip_prefix('\\') {
        Some(rest) => rest.chars().next().is_some_and(|c| after_bs.contains(&c)) && s.contains(a),
        None => s.contains(a),
    };
    // basic_latex
    for (a, b) in [
        ("\\mathrm{T}", "T"),
        ("\\mathrm{d}", "d"),
        ("{\\rm d}", "d"),
        ("\\mathrm{th}", ""),
        ("\\displaystyle", ""),
        ("\\text{ }", ""),
        ("\\text{}", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\mathrm{", "\\text{"),
        ("\\mathit{", "\\text{"),
        ("\\mathbf{", "\\text{"),
        ("\\textnormal{", "\\text{"),
        ("\\textbf{", "\\text{"),
        ("\\textit{", "\\text{"),
        ("\\textrm{", "\\text{"),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\cfrac", "\\frac"),
        ("\\text{ and }", ","),
        ("\\text{ or }", ","),
        ("infinity", "\\infty"),
        ("\\ldots", " "),
        ("\\text{percentage}", "\\%"),
        ("\\text{percent}", "\\%"),
        ("\\text{pct}", "\\%"),
    ] {
        if may_hold(a, &s, &after_bs) {
            s = s.replace(a, b);
            // A replacement may bring a command of its own (`\mathrm{` -> `\text{`).
            if let Some(c) = b.strip_prefix('\\').and_then(|r| r.chars().next())
                && !after_bs.contains(&c)
            {
                after_bs.push(c);
            }
        }
    }
    // Each pass below is skipped when the text cannot hold what it rewrites (most answers
    // are short and plain).
    if s.contains("left") || s.contains("right") {
        s = remove_left_right(&s);
    }
    s = regex_like_subs(&s);
    if s.contains(['\n', '\t']) {
        s = s.replace(['\n', '\t'], " ");
    }
    if !s.contains("matrix") && s.contains("\\\\") {
        let t: Vec<char> = crate::mv::chars(&s);
        let mut out = String::new();
        let mut i = 0;
        while i < t.len() {
            if starts(&t, i, "\\\\") && at(&t, i + 2).is_some_and(|c| c.is_alphabetic()) {
                out.push('\\');
                i += 2;
                continue;
            }
            out.push(t[i]);
            i += 1;
        }
        s = out;
    }
    // units: a trailing \text{..} or \mbox{..}, then unit words (twice)
    if s.contains("\\text{") || s.contains("\\mbox{") {
        s = strip_trailing_text(&s);
    }
    for _ in 0..2 {
        if let Some(x) = strip_unit(&s) {
            s = x;
        }
    }
    // nits
    if s.starts_with('.') {
        s = format!("0{s}");
    }
    if s.trim() == "0.5" {
        s = "\\frac{1}{2}".into();
    }
    s = malformed(&s);
    s.trim().to_string()
}

fn remove_left_right(s: &str) -> String {
    let t: Vec<char> = crate::mv::chars(s);
    let mut out = String::new();
    let mut i = 0;
    while i < t.len() {
        for w in ["\\left", "\\right", "\\mleft", "\\mright"] {
            if starts(&t, i, w) {
                let k = i + w.chars().count();
                if !at(&t, k).is_some_and(|c| c.is_ascii_alphabetic()) {
                    i = k;
                    break;
                }
            }
        }
        if i < t.len() {
            out.push(t[i]);
            i += 1;
        }
    }
    out
}

fn regex_like_subs(s: &str) -> String {
    let t: Vec<char> = crate::mv::chars(s);
    let mut out = String::new();
    let mut i = 0;
    while i < t.len() {
        let c = t[i];
        // \! and following whitespace
        if starts(&t, i, "\\!") {
            i += 2;
            while at(&t, i).is_some_and(ws) {
                i += 1;
            }
            continue;
        }
        // quotes
        if (c == '"' || c == '\'') && (i == 0 || t[i - 1] != '\\') {
            i += 1;
            continue;
        }
        // whitespace + . + digit -> " 0."
        if ws(c) && at(&t, i + 1) == Some('.') && at(&t, i + 2).is_some_and(digit) {
            out.push_str(" 0.");
            i += 2;
            continue;
        }
        if c == '{' && at(&t, i + 1) == Some('.') && at(&t, i + 2).is_some_and(digit) {
            out.push_str("{0.");
            i += 2;
            continue;
        }
        // {,} with optional spaces
        if c == '{' {
            let mut k = i + 1;
            while at(&t, k) == Some(' ') {
                k += 1;
            }
            if at(&t, k) == Some(',') {
                let mut k2 = k + 1;
                while at(&t, k2) == Some(' ') {
                    k2 += 1;
                }
                if at(&t, k2) == Some('}') {
                    out.push(',');
                    i = k2 + 1;
                    continue;
                }
            }
        }
        // (,)?\s+(and|or) not after a letter, not followed by a letter
        if (c == ',' || ws(c)) && (i == 0 || !t[i - 1].is_alphabetic()) {
            let mut k = i;
            if t[k] == ',' {
                k += 1;
            }
            let w = t[k..].iter().take_while(|c| ws(**c)).count();
            if w > 0 {
                for word in ["and", "or"] {
                    let e = k + w + word.len();
                    if starts(&t, k + w, word) && !at(&t, e).is_some_and(|c| c.is_alphabetic()) {
                        out.push(',');
                        i = e;
                        break;
                    }
                }
                if i >= k + w {
                    continue;
                }
            }
        }
        // \ + whitespace
        if c == '\\' && at(&t, i + 1).is_some_and(ws) && (i == 0 || t[i - 1] != '\\') {
            out.push(' ');
            i += 2;
            continue;
        }
        // percent words
        let w = t[i..].iter().take_while(|c| ws(**c)).count();
        let mut hit = false;
        for word in ["percentage", "percent", "pct"] {
            if starts(&t, i + w, word) && (w > 0 || c == 'p') {
                out.push_str("\\%");
                i += w + word.len();
                hit = true;
                break;
            }
        }
        if hit {
            continue;
        }
        // inf -> \infty (not after \, not followed by inity)
        if starts(&t, i, "inf")
            && (i == 0 || t[i - 1] != '\\')
            && !starts(&t, i + 3, "inity")
            && !starts(&t, i, "infty")
        {
            out.push_str("\\infty");
            i += 3;
            continue;
        }
        if starts(&t, i, " sqrt") {
            out.push_str("\\sqrt");
            i += 5;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

fn strip_trailing_text(s: &str) -> String {
    let t: Vec<char> = crate::mv::chars(s);
    for i in 0..t.len() {
        for cmd in ["\\text{", "\\mbox{"] {
            if !starts(&t, i, cmd) {
                continue;
            }
            // `\text{.*?}` then an optional `^d` / `{^d}`, then the end.
            let mut k = i + cmd.len();
            while k < t.len() {
                if t[k] == '}' {
                    let mut e = k + 1;
                    if at(&t, e) == Some('^') && at(&t, e + 1).is_some_and(digit) {
                        e += 2;
                    } else if starts(&t, e, "{^")
                        && at(&t, e + 2).is_some_and(digit)
                        && at(&t, e + 3) == Some('}')
                    {
                        e += 4;
                    }
                    if t[e..].iter().all(|c| ws(*c)) {
                        let out = text(&t, 0, i).trim().to_string();
                        if !out.is_empty() {
                            return out;
                        }
                        return s.to_string();
                    }
                }
                k += 1;
            }
        }
    }
    s.to_string()
}

fn malformed(s: &str) -> String {
    // a whole `int/int` becomes a fraction
    if let Some((a, b)) = s.trim().split_once('/')
        && !a.is_empty()
        && !b.is_empty()
        && a.trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit())
        && b.chars().all(|c| c.is_ascii_digit())
    {
        return format!("\\frac{{{a}}}{{{b}}}");
    }
    // Every rewrite below starts at `^(`, `sqrt(`, `\sqrt` or `\frac`.
    if !s.contains("^(") && !s.contains("sqrt") && !s.contains("\\frac") {
        return s.to_string();
    }
    let t: Vec<char> = crate::mv::chars(s);
    let mut out = String::new();
    let mut i = 0;
    while i < t.len() {
        if starts(&t, i, "^(")
            && let Some(close) = matching(&t, i + 1, '(', ')')
        {
            out.push_str("^{");
            out.push_str(&text(&t, i + 2, close));
            out.push('}');
            i = close + 1;
            continue;
        }
        if starts(&t, i, "sqrt(")
            && (i == 0 || t[i - 1] != '\\')
            && let Some(close) = matching(&t, i + 4, '(', ')')
        {
            out.push_str("\\sqrt{");
            out.push_str(&text(&t, i + 5, close));
            out.push('}');
            i = close + 1;
            continue;
        }
        if starts(&t, i, "\\sqrt") && at(&t, i + 5).is_some_and(|c| c.is_alphanumeric()) {
            out.push_str("\\sqrt{");
            out.push(t[i + 5]);
            out.push('}');
            i += 6;
            continue;
        }
        if starts(&t, i, "\\frac") {
            let mut k = i + 5;
            let mut args = Vec::new();
            for _ in 0..2 {
                match at(&t, k) {
                    Some('{') => match matching(&t, k, '{', '}') {
                        Some(c) => {
                            args.push(text(&t, k + 1, c));
                            k = c + 1;
                        }
                        None => break,
                    },
                    Some(c) if c.is_alphanumeric() => {
                        args.push(c.to_string());
                        k += 1;
                    }
                    _ => break,
                }
            }
            if args.len() == 2 {
                out.push_str(&format!("\\frac{{{}}}{{{}}}", args[0], args[1]));
                i = k;
                continue;
            }
        }
        out.push(t[i]);
        i += 1;
    }
    out
}

pub(super) fn matching(t: &[char], open_at: usize, open: char, close: char) -> Option<usize> {
    let mut depth = 0;
    for (k, &c) in t.iter().enumerate().skip(open_at) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(k);
            }
        }
    }
    None
}
