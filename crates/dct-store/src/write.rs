//! Writes, listings and deletes.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{is_transient, request_error};
use crate::{Store, StoreError};

/// An object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its path relative to the store's prefix (`tiles/tile_000000.dct`).
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Store {
    /// Puts `bytes` at `rel`, atomically: the object appears whole or not at all, on every backend (local
    /// files: a temporary file renamed into place; object stores: one single-part PUT, which they commit
    /// whole). Transient failures are retried (a PUT replaces the whole object, so repeating one is harmless).
    pub async fn put(&self, rel: &str, bytes: Bytes) -> Result<(), StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || self.inner.put(&path, PutPayload::from_bytes(bytes.clone())))
            .await;
        got.map(|_| ()).map_err(|e| request_error("PUT", self.url(rel), e, attempts))
    }

    /// Puts `bytes` at `rel` only if no object is there: `Ok(true)` if this call created it, `Ok(false)` if one
    /// was there already. Atomic on local files, in memory and on object stores that support conditional PUTs;
    /// where a backend does not, it falls back to a check and a PUT (two writers could then both succeed).
    pub async fn put_if_absent(&self, rel: &str, bytes: Bytes) -> Result<bool, StoreError> {
        let path = self.path(rel);
        let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || self.inner.put_opts(&path, PutPayload::from_bytes(bytes.clone()), create()))
            .await;
        match got {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
            Err(object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }) => {
                if self.exists(rel).await? {
                    return Ok(false);
                }
                self.put(rel, bytes).await.map(|()| true)
            }
            Err(e) => Err(request_error("PUT", self.url(rel), e, attempts)),
        }
    }

    /// Removes the temporary files that writes into a local directory killed before their rename left under
    /// `prefix`, for the objects `of` names (it is given each one's path relative to this location: a sweep
    /// touches only what its caller writes, never a file of someone else's that happens to be named alike); returns
    /// how many. They are invisible to listings, so nothing else would remove them. Object stores keep nothing of a
    /// PUT that did not complete: there this does nothing. Call it only where no write into `prefix` is under way.
    pub async fn remove_leftovers(&self, prefix: &str, of: fn(&str) -> bool) -> Result<usize, StoreError> {
        let Some(root) = self.local_dir() else { return Ok(0) };
        let rel = prefix.trim_matches('/').to_string();
        let dir = root.join(&rel);
        let shown = self.url(prefix);
        tokio::task::spawn_blocking(move || remove_leftovers_in(&dir, &rel, of))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
            .map_err(|e| StoreError::Request {
                op: "DELETE",
                url: shown,
                message: format!("removing temporary files left by an interrupted write: {e}"),
                transient: false,
                attempts: 1,
            })
    }

    /// Copies the object at `from` to `to` within this location, replacing `to`: a server-side copy on object
    /// stores (no bytes pass through this process), a hard link on local files (so a copy of a staged object that
    /// is then deleted costs no I/O).
    pub async fn copy(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let (a, b) = (self.path(from), self.path(to));
        let (got, attempts) = self.retry().run_counted(is_transient, || self.inner.copy(&a, &b)).await;
        got.map_err(|e| request_error("COPY", format!("{} -> {}", self.url(from), self.url(to)), e, attempts))
    }

    /// Copies the object `from` of the location `source` to `to` here without passing its bytes through this
    /// process, where the two locations allow it: a hard link between local directories (on one file system), or a
    /// server-side copy between locations of one backend (the same store, or the same bucket of an object store).
    /// `Ok(false)`: they do not (the caller copies the bytes itself); nothing was written.
    pub async fn copy_from(&self, source: &Store, from: &str, to: &str) -> Result<bool, StoreError> {
        if let (Some(src), Some(dst)) = (source.local_dir(), self.local_dir()) {
            let (src, dst) = (src.join(from), dst.join(to));
            return Ok(tokio::task::spawn_blocking(move || hard_link_into_place(&src, &dst)).await.unwrap_or(false));
        }
        let same_bucket = bucket_of(self.root()).is_some_and(|b| Some(b) == bucket_of(source.root()));
        let same_backend = Arc::ptr_eq(&self.base, &source.base) || same_bucket;
        if !same_backend || self.local_dir().is_some() || source.local_dir().is_some() {
            return Ok(false);
        }
        let (a, b) = (source.path(from), self.path(to));
        let (got, attempts) = self.retry().run_counted(is_transient, || self.inner.copy(&a, &b)).await;
        got.map(|()| true)
            .map_err(|e| request_error("COPY", format!("{} -> {}", source.url(from), self.url(to)), e, attempts))
    }

    /// Every object under `rel` (a folder relative to the prefix; empty for the whole location). A location that
    /// does not exist has none.
    pub async fn list(&self, rel: &str) -> Result<Vec<ObjectInfo>, StoreError> {
        let prefix = self.path(rel);
        let prefix = (!prefix.as_ref().is_empty()).then_some(&prefix);
        let (got, attempts) =
            self.retry().run_counted(is_transient, || self.inner.list(prefix).try_collect::<Vec<_>>()).await;
        match got {
            Ok(found) => Ok(found.into_iter().filter_map(|meta| self.info(meta)).collect()),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(request_error("LIST", self.url(rel), e, attempts)),
        }
    }

    /// The first object a listing of the whole location returns, if any, temporary files that killed writes left
    /// aside (one request, for "is it empty?").
    pub async fn first_object(&self) -> Result<Option<ObjectInfo>, StoreError> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let first = || async {
            let mut listed = self.inner.list(prefix);
            while let Some(meta) = listed.next().await.transpose()? {
                if meta.location.filename().is_none_or(|name| leftover_of(name).is_none()) {
                    return Ok(Some(meta));
                }
            }
            Ok(None)
        };
        let (got, attempts) = self.retry().run_counted(is_transient, first).await;
        match got {
            Ok(meta) => Ok(meta.and_then(|m| self.info(m))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            // A server that lists nothing (a WebDAV server refusing PROPFIND, say) still answers for the manifest:
            // a dataset there is found by it.
            Err(e) if crate::error::is_unsupported(&e) => {
                let manifest = "manifest.json";
                Ok(self.exists(manifest).await?.then(|| ObjectInfo { path: manifest.into(), size: 0 }))
            }
            Err(e) => Err(request_error("LIST", self.root().to_string(), e, attempts)),
        }
    }

    fn info(&self, meta: object_store::ObjectMeta) -> Option<ObjectInfo> {
        Some(ObjectInfo { path: self.relative(&meta.location)?, size: meta.size })
    }

    /// Deletes `rel`; a missing object is fine.
    pub async fn delete(&self, rel: &str) -> Result<(), StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self.retry().run_counted(is_transient, || self.inner.delete(&path)).await;
        match got {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(request_error("DELETE", self.url(rel), e, attempts)),
        }
    }

    /// Deletes every object under the folder `rel`; returns how many there were.
    pub async fn delete_all(&self, rel: &str) -> Result<usize, StoreError> {
        let found = self.list(rel).await?;
        for object in &found {
            self.delete(&object.path).await?;
        }
        Ok(found.len())
    }
}

/// `scheme://bucket` of a cloud object-store URL (`None` for anything else: local, memory and HTTP locations copy
/// only within one store).
fn bucket_of(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    if !["s3", "s3a", "gs", "az", "azure", "abfs", "abfss"].contains(&scheme) {
        return None;
    }
    let end = rest.find('/').map_or(url.len(), |i| scheme.len() + 3 + i);
    (!rest.is_empty()).then(|| &url[..end])
}

/// The name of the object that `name` is a temporary file of, if it is one a write into a local directory leaves
/// when it is killed before its rename: `object_store`'s staging files (`NAME#N`) or [`hard_link_into_place`]'s
/// links (`.NAME.link.PID.N`).
fn leftover_of(name: &str) -> Option<&str> {
    let numbered = |tail: &str| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, tail)) = name.rsplit_once('#') {
        return (!head.is_empty() && numbered(tail)).then_some(head);
    }
    let mut parts = name.strip_prefix('.')?.rsplitn(3, '.');
    let (n, pid, head) = (parts.next()?, parts.next()?, parts.next()?);
    let target = head.strip_suffix(".link")?;
    (numbered(n) && numbered(pid) && !target.is_empty()).then_some(target)
}

/// Removes the [`leftover_of`] files under `dir` (recursively; `rel` is `dir`'s path relative to the location)
/// whose object `of` names; returns how many.
fn remove_leftovers_in(dir: &std::path::Path, rel: &str, of: fn(&str) -> bool) -> std::io::Result<usize> {
    let mut removed = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let path_of = |name: &str| if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if kind.is_dir() {
            removed += remove_leftovers_in(&entry.path(), &path_of(&name), of)?;
        } else if kind.is_file() && leftover_of(&name).is_some_and(|target| of(&path_of(target))) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// Hard-links `src` at `dst` (a temporary link renamed into place, so `dst` appears whole); `false` if the file
/// system refuses the link (another device, no hard links), leaving nothing behind.
fn hard_link_into_place(src: &std::path::Path, dst: &std::path::Path) -> bool {
    let Some(dir) = dst.parent() else { return false };
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = dst.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.link.{}.{n}", std::process::id()));
    if std::fs::hard_link(src, &tmp).is_err() {
        return false;
    }
    if std::fs::rename(&tmp, dst).is_err() {
        let _ = std::fs::remove_file(&tmp);
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_of_killed_writes_are_told_from_objects() {
        let leftovers = [
            ("tile_000059.dct#1", "tile_000059.dct"),
            ("manifest.json#12", "manifest.json"),
            (".t.dct.link.4242.0", "t.dct"),
        ];
        for (name, of) in leftovers {
            assert_eq!(leftover_of(name), Some(of), "{name}");
        }
        let others =
            ["tile_000059.dct", "#1", "a#b", "obs_0000.parquet", ".hidden", ".x.link.pid.0", "link.1.2", "..link.1.2"];
        for name in others {
            assert_eq!(leftover_of(name), None, "{name}");
        }
    }

    #[test]
    fn leftovers_are_removed_and_objects_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tiles")).unwrap();
        std::fs::create_dir_all(dir.path().join("mine")).unwrap();
        let files =
            ["tiles/tile_000000.dct", "tiles/tile_000001.dct#3", "tiles/.tile_000002.dct.link.7.1", "x#2", "mine/y#4"];
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let store = Store::from_url(dir.path().to_str().unwrap(), &crate::StoreOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let anything: fn(&str) -> bool = |_| true;
        let tiles_and_x: fn(&str) -> bool = |rel| rel.starts_with("tiles/") || rel == "x";
        assert_eq!(rt.block_on(store.remove_leftovers("tiles", anything)).unwrap(), 2);
        assert!(dir.path().join("tiles/tile_000000.dct").exists() && dir.path().join("x#2").exists());
        // Only the leftovers of the objects named: `mine/y#4` is not the caller's.
        assert_eq!(rt.block_on(store.remove_leftovers("", tiles_and_x)).unwrap(), 1);
        assert!(!dir.path().join("x#2").exists() && dir.path().join("mine/y#4").exists());
        assert_eq!(rt.block_on(store.remove_leftovers("", anything)).unwrap(), 1);
        assert_eq!(rt.block_on(Store::memory("m").remove_leftovers("", anything)).unwrap(), 0);
    }

    #[test]
    fn lists_and_deletes_relative_to_the_prefix() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let root = Store::memory("w");
            let s = root.child("a/ds");
            assert_eq!(s.first_object().await.unwrap(), None);
            for rel in ["manifest.json", "tiles/t0.dct", "tiles/t1.dct", "obs/schema.json"] {
                s.put(rel, Bytes::from_static(b"abc")).await.unwrap();
            }
            root.put("a/other/x", Bytes::from_static(b"zz")).await.unwrap();
            let mut tiles: Vec<_> = s.list("tiles").await.unwrap().into_iter().map(|o| o.path).collect();
            tiles.sort();
            assert_eq!(tiles, ["tiles/t0.dct", "tiles/t1.dct"]);
            assert_eq!(s.list("").await.unwrap().len(), 4);
            assert!(s.first_object().await.unwrap().is_some());
            assert_eq!(s.delete_all("tiles").await.unwrap(), 2);
            s.delete("tiles/t0.dct").await.unwrap();
            assert_eq!(s.list("").await.unwrap().len(), 2);
            assert_eq!(root.list("a/other").await.unwrap(), [ObjectInfo { path: "a/other/x".into(), size: 2 }]);
        });
    }

    #[test]
    fn put_if_absent_creates_once_and_copy_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let local = Store::from_url(dir.path().to_str().unwrap(), &crate::StoreOptions::default()).unwrap();
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            for s in [Store::memory("w"), local] {
                assert!(s.put_if_absent("lock.json", Bytes::from_static(b"one")).await.unwrap());
                assert!(!s.put_if_absent("lock.json", Bytes::from_static(b"two")).await.unwrap());
                assert_eq!(s.get_limited("lock.json", 10).await.unwrap(), Bytes::from_static(b"one"));
                s.put("a/x", Bytes::from_static(b"new")).await.unwrap();
                s.put("b/x", Bytes::from_static(b"old!")).await.unwrap();
                s.copy("a/x", "b/x").await.unwrap();
                assert_eq!(s.get_limited("b/x", 10).await.unwrap(), Bytes::from_static(b"new"));
                assert!(matches!(s.copy("a/none", "b/y").await, Err(StoreError::NotFound { .. })));
            }
        });
    }

    #[test]
    fn copy_from_links_local_files_and_copies_within_one_backend() {
        let dir = tempfile::tempdir().unwrap();
        let open =
            |p: &str| Store::from_url(dir.path().join(p).to_str().unwrap(), &crate::StoreOptions::default()).unwrap();
        let (a, b) = (open("a"), open("b"));
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            a.put("tiles/t0", Bytes::from_static(b"tile")).await.unwrap();
            assert!(b.copy_from(&a, "tiles/t0", "tiles/t9").await.unwrap());
            assert_eq!(b.get_limited("tiles/t9", 10).await.unwrap(), Bytes::from_static(b"tile"));
            use std::os::unix::fs::MetadataExt;
            let ino = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().ino();
            assert_eq!(ino(dir.path().join("a/tiles/t0")), ino(dir.path().join("b/tiles/t9")));
            assert_eq!(std::fs::read_dir(dir.path().join("b/tiles")).unwrap().count(), 1, "no temporary link left");
            // Two memory stores are two backends: nothing is copied between them; within one, a server-side copy.
            let (m, n) = (Store::memory("m"), Store::memory("m"));
            m.put("x", Bytes::from_static(b"1")).await.unwrap();
            assert!(!n.copy_from(&m, "x", "y").await.unwrap());
            let child = m.child("sub");
            assert!(child.copy_from(&m, "x", "y").await.unwrap());
            assert_eq!(m.get_limited("sub/y", 10).await.unwrap(), Bytes::from_static(b"1"));
        });
    }
}
