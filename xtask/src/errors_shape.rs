//! A check of the error types' shape, run as a test: an error says its cause once.
//!
//! The workspace's error types put their cause in their own message (so that a library caller, a log line and
//! the Python exception all carry the whole story) and therefore return no cause from `source()`; otherwise a
//! printer that walks the chain (`anyhow`'s `{:#}`, the CLI's) says it twice. With `thiserror` a cause becomes a
//! source through `#[source]`, `#[from]` (except on a `#[error(transparent)]` variant, which is its inner error)
//! or a field named `source`; none may appear.

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Lines of `text` that give an error type a source (see the module docs).
    fn sources(text: &str) -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        let mut found = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            let transparent = || {
                lines[..i]
                    .iter()
                    .rev()
                    .map(|l| l.trim())
                    .find(|l| !l.starts_with("///"))
                    .is_some_and(|l| l == "#[error(transparent)]")
            };
            // A field declaration `source: Type,` (a type: a path or a capitalised name), not a value in a literal.
            let field = t.strip_prefix("pub ").unwrap_or(t).strip_prefix("source: ").is_some_and(|ty| {
                let ty = ty.trim_end_matches(',');
                ty.starts_with(|c: char| c.is_ascii_uppercase())
                    || ty.starts_with("std::")
                    || (ty.contains("::") && !ty.contains('(') && !ty.contains('{'))
            });
            if t.contains("#[source]") || (t.contains("#[from]") && !transparent()) || field {
                found.push(format!("{}: {t}", i + 1));
            }
        }
        found
    }

    #[test]
    fn error_types_say_their_cause_once() {
        let mut files = Vec::new();
        rust_files(&crate::root().join("crates"), &mut files);
        let mut offending = Vec::new();
        for f in files.iter().filter(|f| f.components().any(|c| c.as_os_str() == "src")) {
            let text = std::fs::read_to_string(f).unwrap();
            if text.contains("thiserror::Error") {
                offending.extend(sources(&text).into_iter().map(|l| format!("{}:{l}", f.display())));
            }
        }
        assert!(offending.is_empty(), "error types that would say a cause twice:\n{}", offending.join("\n"));
    }

    #[test]
    fn the_check_sees_each_way_a_source_is_made() {
        let text = "#[derive(thiserror::Error)]\nenum E {\n    #[error(\"{path}: {cause}\")]\n    Io {\n        \
                    #[source]\n        cause: std::io::Error,\n    },\n    #[error(\"x: {0}\")]\n    X(#[from] Y),\n    \
                    #[error(\"{source}\")]\n    Z {\n        source: Box<W>,\n    },\n    /// Its inner error.\n    \
                    #[error(transparent)]\n    T(#[from] V),\n}\nfn f() { E::Z { source: w.into() }; }\n";
        let found = sources(text);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("#[source]") && found[1].contains("X(#[from]") && found[2].contains("Box<W>"));
    }
}
