//! Shared output helpers: human tables or JSON.

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(value).expect("JSON values always serialize"));
}

/// Formats a byte count for people (B, kB, MB, GB; decimal units).
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1000.0 && u + 1 < units.len() {
        x /= 1000.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{x:.2} {}", units[u]) }
}
