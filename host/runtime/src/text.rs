//! Guest-controlled text on its way to a log line or a terminal: control characters shown
//! escaped, so a guest cannot forge host log lines (a `\n` and a timestamp of its own) or drive
//! the operator's terminal (ANSI escapes such as `ESC[2J`), and cannot reorder what is shown
//! with Unicode bidirectional controls.
//!
//! Reports and JSON output keep the guest's text as it was (JSON escapes it itself); every
//! place that prints it as text goes through [`escape_control`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown escaped: C0 and C1 controls, DEL, and the bidirectional embedding,
/// override and isolate controls.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character escaped (`\n`, `\r`, `\t`, else `\u{XX}`) and
/// backslashes doubled where anything was escaped, so the result is one line of plain text.
/// Borrows when there is nothing to escape.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_lines_and_terminal_escapes_are_shown_escaped() {
        assert!(matches!(
            escape_control("plain text, é ✓"),
            Cow::Borrowed(_)
        ));
        let forged = "oops\n2099-01-01T00:00:00Z ERROR rollbox: FAKE\x1b[2J\u{202E}x\\";
        let shown = escape_control(forged);
        assert_eq!(
            shown,
            "oops\\n2099-01-01T00:00:00Z ERROR rollbox: FAKE\\u{1b}[2J\\u{202e}x\\\\"
        );
        assert!(!shown.chars().any(is_unsafe));
        assert_eq!(escape_control("\u{9b}\u{7f}\r\t"), "\\u{9b}\\u{7f}\\r\\t");
    }
}
