//! `Manifest::from_json` (dct-dataset) on arbitrary bytes: never panics; an accepted manifest is valid, its
//! derived values (cell index, nonzeros, obs shards) never panic, and it survives a write/read round trip.
//! Built only with the `parsers` feature.
//!
//! Known and tolerated: serde_json's default float parsing is not correctly rounded, so a float in `metadata`
//! or an unknown key can move by an ULP on a rewrite (input: `fuzz/regressions/manifest/`; fix: serde_json's
//! `float_roundtrip` feature). Floats are therefore compared to within 2 ULPs; everything else exactly.

#![no_main]

use dct_dataset::Manifest;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Equal JSON values, except that two floats may differ by up to 2 units in the last place.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || (x.signum() == y.signum() && x.to_bits().abs_diff(y.to_bits()) <= 2)
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| close(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| close(v, w)))
        }
        _ => a == b,
    }
}

fn assert_same(a: &Manifest, b: &Manifest) {
    let strip = |m: &Manifest| Manifest { metadata: Value::Null, extra: Default::default(), ..m.clone() };
    assert_eq!(strip(a), strip(b), "manifest changed in a write/read round trip");
    assert!(close(&a.metadata, &b.metadata), "metadata changed: {:?} -> {:?}", a.metadata, b.metadata);
    let (x, y) = (Value::Object(a.extra.clone()), Value::Object(b.extra.clone()));
    assert!(close(&x, &y), "unknown keys changed: {x:?} -> {y:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Manifest::from_json(data) else { return };
    m.validate().expect("from_json returned a manifest that does not validate");
    let index = m.cell_index();
    assert_eq!(index.n_tiles(), m.n_tiles());
    assert_eq!(index.n_cells(), m.n_cells, "n_cells is not the sum of tile_cells");
    if m.n_cells > 0 {
        assert!(index.locate(m.n_cells - 1).is_some());
    }
    assert_eq!(index.locate(m.n_cells), None);
    let _ = (m.nnz(), m.n_obs_shards(), m.tile_version());
    let json = m.to_json_pretty();
    let again = Manifest::from_json(&json).expect("a written manifest reads back");
    assert_same(&m, &again);
    let third = Manifest::from_json(&again.to_json_pretty()).expect("a rewritten manifest reads back");
    assert_same(&again, &third);
});
