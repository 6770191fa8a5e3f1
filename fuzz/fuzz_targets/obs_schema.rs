//! `ObsSchema::parse` (dct-obs, `obs/schema.json`) on arbitrary bytes: never panics; an accepted schema has an
//! Arrow schema, and its `to_json` text parses back to the same schema and is a fixed point. Built only with
//! the `parsers` feature.

#![no_main]

use dct_obs::ObsSchema;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = ObsSchema::parse(data, "fuzz://schema.json") else { return };
    assert_eq!(schema.arrow_schema().fields().len(), schema.columns.len());
    for (i, c) in schema.columns.iter().enumerate() {
        assert_eq!(schema.position(&c.name), Some(i), "column names are not unique");
    }
    let json = schema.to_json();
    let again = ObsSchema::parse(json.as_bytes(), "fuzz://again").expect("written schema.json reads back");
    assert_eq!(again, schema, "schema changed in a write/read round trip");
    assert_eq!(again.to_json(), json, "to_json is not a fixed point");
});
