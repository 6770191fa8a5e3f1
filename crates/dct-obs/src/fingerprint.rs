//! SHA-256 helpers and the obs fingerprint.

use sha2::{Digest, Sha256};

use crate::pyjson;

/// Lowercase hex of a digest.
pub fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// Length of an obs fingerprint in hex characters.
pub const FINGERPRINT_LEN: usize = 24;

/// The canonical JSON the fingerprint hashes: Python's
/// `json.dumps({"schema": schema_text, "tile_cells": tile_cells, "shards": shard_sha256}, sort_keys=True)`, i.e.
/// `{"schema": "<schema text as a JSON string>", "shards": ["<hex>", ...], "tile_cells": [n, ...]}` with the
/// separators `", "` / `": "` and non-ASCII escaped as `\uXXXX`.
pub fn fingerprint_json<S: AsRef<str>>(schema_text: &str, tile_cells: &[u64], shard_sha256: &[S]) -> String {
    let mut out = String::with_capacity(schema_text.len() + 64 + 70 * shard_sha256.len() + 8 * tile_cells.len());
    out.push_str("{\"schema\": ");
    pyjson::write_str(&mut out, schema_text);
    out.push_str(", \"shards\": ");
    pyjson::write_str_list(&mut out, shard_sha256);
    out.push_str(", \"tile_cells\": ");
    pyjson::write_u64_list(&mut out, tile_cells);
    out.push('}');
    out
}

/// The obs fingerprint: the first 24 hex characters of the SHA-256 of [`fingerprint_json`]. `schema_text` is the
/// exact text of `obs/schema.json`; `shard_sha256` the lowercase hex SHA-256 of each shard, in shard order.
pub fn obs_fingerprint<S: AsRef<str>>(schema_text: &str, tile_cells: &[u64], shard_sha256: &[S]) -> String {
    let mut h = sha256_hex(fingerprint_json(schema_text, tile_cells, shard_sha256).as_bytes());
    h.truncate(FINGERPRINT_LEN);
    h
}

/// Whether `s` looks like a fingerprint (24 hex digits).
pub fn is_fingerprint(s: &str) -> bool {
    s.len() == FINGERPRINT_LEN && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `s` looks like a SHA-256 (64 hex digits).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_known_answer() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn canonical_json_matches_python() {
        // python3 -c 'import json; print(json.dumps({"schema": "{\"a\": \"\u00e9\"}",
        //   "tile_cells": [3, 1], "shards": ["ab"]}, sort_keys=True))'
        assert_eq!(
            fingerprint_json("{\"a\": \"\u{e9}\"}", &[3, 1], &["ab"]),
            r#"{"schema": "{\"a\": \"\u00e9\"}", "shards": ["ab"], "tile_cells": [3, 1]}"#
        );
    }
}
