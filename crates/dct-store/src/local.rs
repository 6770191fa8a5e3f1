//! Local files as objects: a dataset object must be a regular file. Opening a FIFO blocks until a writer comes
//! (forever, for a reader), and a device reads as whatever it yields; a path through a file ("dataset" given as a
//! file) names no object. So every local read first looks at what the path is, without opening it.

use std::ops::Range;
use std::path::Path as FsPath;
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore, PutOptions, PutPayload, PutResult};

/// What is wrong with reading `path` as a regular file, if anything, found without opening it: `NotFound` for a
/// path through a file, `InvalidInput` naming the kind for a FIFO, socket, device or directory. Nothing there, and
/// other failures to look, are left to the read, which reports them. (Also for the obs cache's files.)
pub fn check_regular_file(path: &FsPath) -> std::io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{}: a component of the path is a file, not a directory", path.display()),
            ));
        }
        Err(_) => return Ok(()),
    };
    if meta.is_file() {
        return Ok(());
    }
    let kind = file_kind(&meta);
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{} is {kind}, not a regular file", path.display()),
    ))
}

#[cfg(unix)]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_dir() { "a directory" } else { "a special file" }
}

/// The local file system, reading only regular files ([`check_regular_file`] before every read).
#[derive(Debug)]
pub(crate) struct LocalFiles {
    local: Arc<LocalFileSystem>,
    inner: Arc<dyn ObjectStore>,
}

impl LocalFiles {
    pub(crate) fn new() -> LocalFiles {
        let local = Arc::new(LocalFileSystem::new());
        LocalFiles { inner: local.clone(), local }
    }

    fn check(&self, location: &Path) -> object_store::Result<()> {
        let path = self.local.path_to_filesystem(location)?;
        check_regular_file(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                object_store::Error::NotFound { path: location.to_string(), source: Box::new(e) }
            }
            _ => object_store::Error::NotSupported { source: Box::new(e) },
        })
    }
}

object_store_layer!(LocalFiles, forward: [put_multipart_opts, delete_stream, copy_opts, rename_opts, list, list_with_delimiter], {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(check_regular_file(&file).is_ok());
        assert!(check_regular_file(&dir.path().join("absent")).is_ok(), "left to the read, which says NotFound");
        let through = check_regular_file(&file.join("manifest.json")).unwrap_err();
        assert_eq!(through.kind(), std::io::ErrorKind::NotFound, "{through}");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = check_regular_file(&fifo).unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        let e = check_regular_file(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }
}
