//! JSON text exactly as Python's `json.dumps` writes it with its default settings (`ensure_ascii=True`,
//! separators `", "` and `": "`), so that identical content gives identical bytes in both languages.

use std::fmt::Write;

/// Appends `s` as a JSON string literal, escaped like Python's `json.dumps` (`ensure_ascii=True`):
/// `"` and `\` are backslash-escaped; `\b \f \n \r \t` use their short forms; every other character outside
/// printable ASCII (`' '..='~'`, so including DEL 0x7f) becomes `\uXXXX` with lowercase hex, characters above
/// U+FFFF as a UTF-16 surrogate pair.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            _ => {
                let mut units = [0u16; 2];
                for unit in ch.encode_utf16(&mut units) {
                    // Writing to a String cannot fail.
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Appends a list of strings, `["a", "b"]`.
pub fn write_str_list<S: AsRef<str>>(out: &mut String, items: &[S]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str(out, item.as_ref());
    }
    out.push(']');
}

/// Appends a list of unsigned integers, `[1, 2]`.
pub fn write_u64_list(out: &mut String, items: &[u64]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{item}");
    }
    out.push(']');
}

/// The string `s` as a Python-compatible JSON literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_str(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_python() {
        // Expected values produced by CPython 3.11 `json.dumps(s)`.
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote("na\u{ef}ve"), r#""na\u00efve""#);
        assert_eq!(quote("a\"b\\c/d"), r#""a\"b\\c/d""#);
        assert_eq!(quote("\n\r\t\u{08}\u{0c}\u{01}\u{1f}\u{7f}"), r#""\n\r\t\b\f\u0001\u001f\u007f""#);
        assert_eq!(quote("\u{1F600}"), r#""\ud83d\ude00""#);
        assert_eq!(quote("\u{20AC}\u{FFFF}"), r#""\u20ac\uffff""#);
        assert_eq!(quote(""), r#""""#);
    }

    #[test]
    fn lists() {
        let mut s = String::new();
        write_u64_list(&mut s, &[100, 0, 50]);
        s.push(' ');
        write_u64_list(&mut s, &[]);
        s.push(' ');
        write_str_list(&mut s, &["x", "y"]);
        assert_eq!(s, r#"[100, 0, 50] [] ["x", "y"]"#);
    }
}
