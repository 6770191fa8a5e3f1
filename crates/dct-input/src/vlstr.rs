//! Variable-length strings read a global-heap collection at a time.
//!
//! `hdf5-pure` resolves a variable-length string dataset one element at a time (a small read, an allocation and a
//! heap-directory lookup per string): about 0.3 µs per string, which made reading the gene and cell names of an
//! input cost more than reading its counts. Here the references are parsed from the dataset's raw bytes, each
//! global-heap collection they point into is read with one positioned read and parsed once, and the strings are
//! sliced out of it. Anything unexpected (an odd element size, an undefined or overflowing address, a collection
//! that does not parse, an object that is missing or shorter than its reference, more bytes than the file holds)
//! gives `None`, and the caller reads the dataset through `hdf5-pure` instead, which reports the problem. So this
//! path only ever returns what the HDF5 library would return. (Where `hdf5-pure` reads less than the HDF5 library,
//! this path follows the library: a collection ending in fewer bytes than an object header, which `hdf5-pure` 0.47
//! refuses as an unexpected end of file, is free space there, as in h5py.)

use std::collections::HashMap;

use hdf5_pure::Dataset;

use crate::h5::H5;

/// Signature of a global-heap collection.
const GCOL: &[u8; 4] = b"GCOL";

/// One parsed collection: its bytes and, sorted by object index, where each object's data lies in them.
struct Collection {
    bytes: Vec<u8>,
    objects: Vec<(u16, usize, usize)>,
}

impl Collection {
    fn object(&self, index: u16) -> Option<(usize, usize)> {
        // Writers number a collection's objects 1, 2, ...: object i is usually entry i - 1.
        if let Some(&(i, start, size)) = self.objects.get(usize::from(index).wrapping_sub(1))
            && i == index
        {
            return Some((start, size));
        }
        let k = self.objects.binary_search_by_key(&index, |o| o.0).ok()?;
        Some((self.objects[k].1, self.objects[k].2))
    }
}

/// A little-endian unsigned integer of `bytes.len()` (1 to 8) bytes.
fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |acc, &b| acc << 8 | u64::from(b))
}

impl H5 {
    /// The `n` strings of the variable-length string dataset `ds`, or `None` if the fast path does not apply
    /// (see the module documentation).
    pub(crate) fn read_vl_strings_bulk(&self, ds: &Dataset, n: u64) -> Option<Vec<String>> {
        // Library calls (element size, raw bytes) are guarded like every other call into `hdf5-pure`.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.vl_strings_bulk(ds, n))).ok().flatten()
    }

    fn vl_strings_bulk(&self, ds: &Dataset, n: u64) -> Option<Vec<String>> {
        let sb = self.file.superblock();
        let (offset_size, length_size) = (usize::from(sb.offset_size), usize::from(sb.length_size));
        if !(2..=8).contains(&offset_size) || !(2..=8).contains(&length_size) {
            return None;
        }
        let base = sb.base_address.get();
        let elem = 4 + offset_size + 4;
        if ds.element_size().ok()? != elem as u64 {
            return None;
        }
        let raw = ds.read_raw().ok()?;
        if raw.len() as u64 != n.checked_mul(elem as u64)? {
            return None;
        }
        // The payload may not exceed the file, as for the library read (refs can repeat one large object).
        let payload: u64 = raw.chunks_exact(elem).map(|r| le(&r[..4])).sum();
        if payload > self.size {
            return None;
        }
        let undefined = u64::MAX >> (64 - 8 * offset_size);
        // Collections by address, and the one the previous string came from (consecutive strings share one).
        let mut collections: Vec<(u64, Collection)> = Vec::new();
        let mut by_address: HashMap<u64, usize> = HashMap::new();
        let mut last: Option<(u64, usize)> = None;
        let mut collection_bytes = 0u64;
        let mut out = Vec::with_capacity(n as usize);
        for r in raw.chunks_exact(elem) {
            let length = le(&r[..4]) as usize;
            let stored = le(&r[4..4 + offset_size]);
            let index = u16::try_from(le(&r[4 + offset_size..])).ok()?;
            if length == 0 && (stored == undefined || stored == 0) {
                out.push(String::new());
                continue;
            }
            if stored == undefined {
                return None;
            }
            let address = stored.checked_add(base)?;
            let at = match last {
                Some((a, k)) if a == address => k,
                _ => match by_address.get(&address) {
                    Some(&k) => k,
                    None => {
                        let c = self.read_collection(address, length_size)?;
                        collection_bytes += c.bytes.len() as u64;
                        if collection_bytes > self.size {
                            return None;
                        }
                        collections.push((address, c));
                        by_address.insert(address, collections.len() - 1);
                        collections.len() - 1
                    }
                },
            };
            last = Some((address, at));
            let c = &collections[at].1;
            let (start, size) = c.object(index)?;
            if length > size {
                return None;
            }
            out.push(String::from_utf8_lossy(&c.bytes[start..start + length]).into_owned());
        }
        Some(out)
    }

    /// Reads and parses the global-heap collection at `address`.
    fn read_collection(&self, address: u64, length_size: usize) -> Option<Collection> {
        let header_len = 8 + length_size;
        let mut header = vec![0u8; header_len];
        if address.checked_add(header_len as u64)? > self.size {
            return None;
        }
        crate::fast::read_exact_at(&self.raw, &mut header, address).ok()?;
        if &header[..4] != GCOL || header[4] != 1 {
            return None;
        }
        let size = le(&header[8..]);
        if size < header_len as u64 || address.checked_add(size)? > self.size {
            return None;
        }
        let mut bytes = vec![0u8; size as usize];
        crate::fast::read_exact_at(&self.raw, &mut bytes, address).ok()?;
        let mut objects = Vec::new();
        let object_header = 8 + length_size;
        let mut pos = header_len;
        // The HDF5 library's walk: objects until the free-space object (index 0) or the end. A tail too short for
        // an object header is free space whatever its bytes hold (editing strings in place leaves old bytes there).
        while pos + object_header <= bytes.len() {
            let index = le(&bytes[pos..pos + 2]) as u16;
            if index == 0 {
                break;
            }
            let data_size = usize::try_from(le(&bytes[pos + 8..pos + object_header])).ok()?;
            let start = pos + object_header;
            start.checked_add(data_size).filter(|&e| e <= bytes.len())?;
            objects.push((index, start, data_size));
            pos = start.checked_add(data_size.checked_add(7)? & !7)?;
        }
        objects.sort_unstable_by_key(|o| o.0);
        if objects.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        Some(Collection { bytes, objects })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use hdf5_pure::{DType, VlenStringReadOptions};

    use super::*;
    use crate::h5::join;

    /// Every variable-length string dataset under `group`.
    fn string_datasets(h5: &H5, group: &str, out: &mut Vec<String>) {
        let g = h5.group(group).unwrap();
        for name in g.datasets().unwrap() {
            let obj = join(group, &name);
            if h5.dataset(&obj).unwrap().dtype().unwrap() == DType::VariableLengthString {
                out.push(obj);
            }
        }
        for name in g.groups().unwrap() {
            string_datasets(h5, &join(group, &name), out);
        }
    }

    /// On every variable-length string dataset of every HDF5 fixture (h5ad indexes, categories, nullable strings,
    /// 10x features and barcodes), the collection reader applies and gives exactly the library's strings.
    #[test]
    fn bulk_strings_equal_the_library_strings() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/inputs");
        let files = ["pbmc200/pbmc200.h5ad", "pbmc200/pbmc200_10x.h5", "wu2020_200.h5ad", "nullable_obs.h5ad"];
        let mut checked = 0;
        for file in files.iter().chain(&["mixed_10x.h5", "tenx_v2.h5", "layouts.h5ad"]) {
            let h5 = H5::open(&dir.join(file)).unwrap();
            let mut objects = Vec::new();
            string_datasets(&h5, "/", &mut objects);
            for obj in objects {
                let ds = h5.dataset(&obj).unwrap();
                // Scalars (`uns` values) are not read as string columns.
                let Ok(n) = h5.len_1d(&ds, &obj) else { continue };
                let library = ds.read_vlen_strings(VlenStringReadOptions::new()).unwrap();
                let bulk = h5.read_vl_strings_bulk(&ds, n);
                assert_eq!(bulk.as_ref(), Some(&library), "{file} {obj}");
                checked += library.len();
            }
        }
        assert!(checked > 60_000, "only {checked} strings compared");
    }

    /// Damaged collections are left to the library (which reports them): the reader never guesses.
    #[test]
    fn damaged_collections_fall_back() {
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/inputs/pbmc200/pbmc200.h5ad");
        let bytes = std::fs::read(&src).unwrap();
        let gcol: Vec<usize> = bytes.windows(4).enumerate().filter(|(_, w)| w == GCOL).map(|(i, _)| i).collect();
        assert!(!gcol.is_empty());
        let dir = std::env::temp_dir().join(format!("dct_vlstr_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut stepped_aside = 0;
        // Break each collection's signature, version, size, and first object's size in turn.
        for (k, &at) in gcol.iter().enumerate() {
            for (what, offset, value) in
                [("signature", 0, b'X'), ("version", 4, 2), ("size", 15, 0x7f), ("object", 31, 0x7f)]
            {
                let mut damaged = bytes.clone();
                damaged[at + offset] = value;
                let path = dir.join(format!("{k}_{what}.h5ad"));
                std::fs::write(&path, &damaged).unwrap();
                let Ok(h5) = H5::open(&path) else { continue };
                let mut objects = Vec::new();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| string_datasets(&h5, "/", &mut objects)))
                    .is_err()
                {
                    continue;
                }
                for obj in objects {
                    let Ok(ds) = h5.dataset(&obj) else { continue };
                    let Ok(n) = h5.len_1d(&ds, &obj) else { continue };
                    let library = ds.read_vlen_strings(VlenStringReadOptions::new()).ok();
                    // Either both give the same strings, or the fast path steps aside.
                    match h5.read_vl_strings_bulk(&ds, n) {
                        Some(bulk) => assert_eq!(Some(bulk), library, "{what} of collection {k}: {obj}"),
                        None => stepped_aside += usize::from(library.is_none()),
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(stepped_aside > 0, "no damage was detected");
    }
}
