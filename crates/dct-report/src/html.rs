//! The page: one HTML document with its style and every plot inline, nothing fetched from the network.

use std::fmt::Write as _;

use serde_json::Value;

/// `s` with the five characters HTML gives meaning to escaped.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number as people read it: integers with thousands separators, others with 4 significant digits.
pub(crate) fn number(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_u64() || n.is_i64() => {
            let s = n.to_string();
            let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            format!("{sign}{out}")
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x != 0.0 && (x.abs() >= 1e6 || x.abs() < 1e-3) { format!("{x:.3e}") } else { format!("{x:.4}") }
        }
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A page being built: sections in order.
pub(crate) struct Page {
    title: String,
    body: String,
    toc: Vec<(String, String)>,
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1180px;\
color:#1d2733;background:#fff}h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;border-bottom:2px solid #3b6ea8;\
padding-bottom:3px;margin-top:34px}h3{font-size:15px;margin:18px 0 4px}table.facts{border-collapse:collapse;\
font-size:14px}table.facts td{padding:3px 14px 3px 0;border-bottom:1px solid #e3e7ec}table.facts td.k{color:#5b6675}\
.grid{display:flex;flex-wrap:wrap;gap:12px}.grid>div{flex:0 0 auto}p.note{color:#5b6675;font-size:13px}\
nav a{margin-right:12px;font-size:14px}svg{display:block}";

impl Page {
    pub(crate) fn new(title: &str) -> Page {
        Page { title: title.to_string(), body: String::new(), toc: Vec::new() }
    }

    /// Starts a section `id` headed `heading`.
    pub(crate) fn section(&mut self, id: &str, heading: &str) {
        if !self.toc.is_empty() {
            self.body.push_str("</section>\n");
        }
        self.toc.push((id.to_string(), heading.to_string()));
        let _ = writeln!(self.body, "<section id=\"{}\"><h2>{}</h2>", escape(id), escape(heading));
    }

    /// A sub-heading.
    pub(crate) fn h3(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h3>{}</h3>", escape(text));
    }

    /// A paragraph of plain text.
    pub(crate) fn note(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p class=\"note\">{}</p>", escape(text));
    }

    /// A table of `(key, label, value)`: each value cell carries `data-key` and `data-value`, the exact value as
    /// JSON (a number in full, a string quoted, `null`), so that a program can read the page's figures back.
    pub(crate) fn facts(&mut self, rows: &[(&str, &str, Value)]) {
        self.body.push_str("<table class=\"facts\">\n");
        for (key, label, value) in rows {
            let exact = format!(" data-value=\"{}\"", escape(&value.to_string()));
            let _ = writeln!(
                self.body,
                "<tr><td class=\"k\">{}</td><td data-key=\"{}\"{exact}>{}</td></tr>",
                escape(label),
                escape(key),
                escape(&number(value))
            );
        }
        self.body.push_str("</table>\n");
    }

    /// Plots side by side (SVG text from [`crate::plots`]).
    pub(crate) fn plots(&mut self, svgs: &[String]) {
        self.body.push_str("<div class=\"grid\">");
        for svg in svgs {
            let _ = write!(self.body, "<div>{svg}</div>");
        }
        self.body.push_str("</div>\n");
    }

    /// The whole document.
    pub(crate) fn finish(mut self, subtitle: &str) -> String {
        if !self.toc.is_empty() {
            self.body.push_str("</section>\n");
        }
        let mut nav = String::new();
        for (id, heading) in &self.toc {
            let _ = write!(nav, "<a href=\"#{}\">{}</a>", escape(id), escape(heading));
        }
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
             <style>{STYLE}</style></head>\n<body><h1>{title}</h1><p class=\"note\">{sub}</p><nav>{nav}</nav>\n{body}\
             </body></html>\n",
            title = escape(&self.title),
            sub = escape(subtitle),
            body = self.body
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_read_as_people_read_them_and_text_is_escaped() {
        assert_eq!(number(&json!(1234567)), "1,234,567");
        assert_eq!(number(&json!(-1000)), "-1,000");
        assert_eq!(number(&json!(12)), "12");
        assert_eq!(number(&json!(0.123456)), "0.1235");
        assert_eq!(number(&Value::Null), "–");
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn a_page_holds_its_sections_and_facts() {
        let mut p = Page::new("t<");
        p.section("summary", "Summary");
        p.facts(&[("n_cells", "cells", json!(5))]);
        p.section("cells", "Cells");
        let html = p.finish("sub");
        assert!(html.contains("<title>t&lt;</title>") && html.contains("data-key=\"n_cells\" data-value=\"5\""));
        assert_eq!(html.matches("<section").count(), 2);
        assert_eq!(html.matches("</section>").count(), 2);
        let mut p = Page::new("t");
        p.facts(&[("id", "id", json!("a\"b")), ("none", "none", Value::Null), ("yes", "yes", json!(true))]);
        let html = p.finish("sub");
        assert!(html.contains("data-key=\"id\" data-value=\"&quot;a\\&quot;b&quot;\">a&quot;b</td>"), "{html}");
        assert!(html.contains("data-key=\"none\" data-value=\"null\">–</td>"));
        assert!(html.contains("data-key=\"yes\" data-value=\"true\">true</td>"));
    }
}
