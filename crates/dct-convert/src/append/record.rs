//! What an append is, as the dataset remembers it: each input's size and SHA-256, the request's identity, the
//! journal that marks an append under way, and the record each finished append leaves in the manifest's
//! `metadata.appends`. The same inputs appended again are found there (nothing changes), an input appended before
//! is refused unless repeated on purpose, and a second append is kept out while one is under way.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::ConvertError;

/// One input of an append, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendedInput {
    /// Path as given.
    pub path: String,
    /// Bytes (of every file, for a Matrix Market folder).
    pub size_bytes: u64,
    /// SHA-256 of its bytes (for a folder: of each file's name and bytes, in name order), lowercase hex.
    pub sha256: String,
    /// Cells it added (known once the inputs are scanned).
    #[serde(default)]
    pub n_cells: u64,
}

/// The request an append runs: its inputs and the options that change what it writes. Two runs with the same
/// request on the same dataset state are the same append (the journal and the records compare these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendRequest {
    /// The inputs, in order.
    pub inputs: Vec<AppendedInput>,
    /// The gene-table column genes are matched by (`None`: the var names).
    pub gene_key: Option<String>,
    /// Whether genes the dataset lacks are dropped.
    pub drop_new_genes: bool,
    /// The matrix read from `.h5ad` inputs (`X`, `raw`, `layer:NAME`).
    pub matrix: String,
    /// zstd level of the new tiles.
    pub level: i32,
}

impl AppendRequest {
    /// 24 hex digits identifying the inputs' contents and the options (not their paths): the same files appended
    /// again, from anywhere, have the same key.
    pub fn inputs_key(&self) -> String {
        let shas: Vec<&str> = self.inputs.iter().map(|i| i.sha256.as_str()).collect();
        let json = serde_json::json!({
            "inputs": shas,
            "gene_key": self.gene_key,
            "drop_new_genes": self.drop_new_genes,
            "matrix": self.matrix,
        });
        hex24(&serde_json::to_vec(&json).expect("json"))
    }

    /// The identity of this append onto a dataset of `base_cells` cells: a repeat of the same inputs on purpose
    /// (after the first completed) is another append.
    pub fn id(&self, base_cells: u64) -> String {
        hex24(format!("{}:{base_cells}:{}", self.inputs_key(), self.level).as_bytes())
    }
}

fn hex24(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// The journal at the dataset's root while an append runs
/// ([`APPEND_JOURNAL_NAME`](dct_dataset::manifest::APPEND_JOURNAL_NAME)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendJournal {
    /// Always `deltacells-append`.
    pub format: String,
    /// [`AppendRequest::id`].
    pub id: String,
    /// When the append started (RFC 3339, UTC).
    pub started: String,
    /// The request.
    pub request: AppendRequest,
    /// The process running it, where the system tells (journals written before runners were recorded have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<super::runner::AppendRunner>,
}

impl AppendJournal {
    pub(crate) fn new(id: String, request: AppendRequest) -> Self {
        let runner = super::runner::AppendRunner::this_process();
        AppendJournal { format: "deltacells-append".into(), id, started: now_rfc3339(), request, runner }
    }

    pub(crate) fn parse(bytes: &[u8], url: &str) -> Result<Self, ConvertError> {
        serde_json::from_slice(bytes).map_err(|e| {
            ConvertError::Output(format!(
                "{url} is not an append journal ({e}): remove it only if no append is running on this dataset"
            ))
        })
    }

    /// What the journal says, for messages.
    pub(crate) fn describe(&self) -> String {
        let paths: Vec<&str> = self.request.inputs.iter().map(|i| i.path.as_str()).collect();
        format!("an append of {} started {}", paths.join(", "), self.started)
    }
}

/// The time now, RFC 3339 in UTC to the second.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `path`'s size and SHA-256 (a folder: each regular file's name and bytes, in name order).
pub(crate) fn digest_input(path: &Path) -> Result<(u64, String), ConvertError> {
    let io = |cause: std::io::Error| ConvertError::Io { path: path.display().to_string(), cause };
    let mut files = Vec::new();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io)? {
            let entry = entry.map_err(io)?;
            if entry.file_type().map_err(io)?.is_file() {
                files.push(entry.path());
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for file in &files {
        if path.is_dir() {
            hasher.update(file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
            hasher.update([0]);
        }
        let mut f = std::fs::File::open(file).map_err(io)?;
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
    }
    Ok((size, hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()))
}

/// The appends a dataset's manifest records (`metadata.appends`), oldest first.
pub(crate) fn recorded_appends(metadata: &Value) -> Vec<Value> {
    metadata.get("appends").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// Whether `request` was appended already (an earlier append of the same inputs and options): its record.
pub(crate) fn earlier_same(records: &[Value], request: &AppendRequest) -> Option<Value> {
    let key = request.inputs_key();
    records.iter().find(|r| r.get("inputs_key").and_then(Value::as_str) == Some(key.as_str())).cloned()
}

/// The first input of `request` that an earlier append added: (its path now, the earlier record's path and time).
pub(crate) fn earlier_input(records: &[Value], request: &AppendRequest) -> Option<(String, String, String)> {
    for input in &request.inputs {
        for record in records {
            let inputs = record.get("inputs").and_then(Value::as_array).into_iter().flatten();
            for earlier in inputs {
                if earlier.get("sha256").and_then(Value::as_str) == Some(input.sha256.as_str()) {
                    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("?").to_string();
                    return Some((input.path.clone(), text(earlier.get("path")), text(record.get("time"))));
                }
            }
        }
    }
    None
}
