//! Small shared helpers.

use object_store::ObjectStore;
use object_store::path::Path;

/// How an object is named in messages: its path and the store holding it.
pub(crate) fn object_url(store: &dyn ObjectStore, path: &Path) -> String {
    format!("{path} (in {store})")
}
