//! Which process runs an append, recorded in its journal, so that the same append started again can tell one
//! still running on this machine (refused: two runs would commit over each other) from one that stopped (completed).

use std::collections::HashSet;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A process on one boot of one machine (Linux: the boot's id, the pid and the process's start time, so that a pid
/// used again by another process is not taken for the runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendRunner {
    /// `/proc/sys/kernel/random/boot_id` of the machine.
    pub boot_id: String,
    /// The process id.
    pub pid: u32,
    /// The process's start time, in clock ticks after boot (`/proc/PID/stat`, field 22).
    pub start_ticks: u64,
}

/// Datasets this process is appending to now (a second thread's append of one of them is refused as running).
static RUNNING_HERE: Mutex<Option<HashSet<String>>> = Mutex::new(None);

impl AppendRunner {
    /// This process, where the system tells (Linux); `None` elsewhere.
    pub(crate) fn this_process() -> Option<Self> {
        let pid = std::process::id();
        Some(AppendRunner { boot_id: boot_id()?, pid, start_ticks: start_ticks(pid)? })
    }

    /// Whether the process still runs an append of `root`: it is this process and one of its threads appends to
    /// `root` now, or it is another process of this boot that is still alive. A runner on another machine (or a
    /// system that does not tell) counts as stopped, as before runners were recorded.
    pub(crate) fn is_running(&self, root: &str) -> bool {
        if Some(self) == Self::this_process().as_ref() {
            return running_here().contains(root);
        }
        boot_id().as_deref() == Some(self.boot_id.as_str()) && start_ticks(self.pid) == Some(self.start_ticks)
    }
}

fn running_here() -> HashSet<String> {
    RUNNING_HERE.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
}

/// Marks `root` as being appended to by this process until the guard is dropped.
pub(crate) struct RunningHere(String);

impl RunningHere {
    pub(crate) fn new(root: &str) -> Self {
        RUNNING_HERE.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashSet::new).insert(root.into());
        RunningHere(root.into())
    }
}

impl Drop for RunningHere {
    fn drop(&mut self) {
        if let Some(set) = RUNNING_HERE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            set.remove(&self.0);
        }
    }
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty())
}

/// Field 22 of `/proc/PID/stat` (after the command, which may hold spaces and parentheses, in parentheses); `None`
/// for a process that has ended (gone, or a zombie its parent has not collected yet).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_runs_and_an_ended_one_does_not() {
        let Some(me) = AppendRunner::this_process() else { return }; // not Linux
        assert!(!me.is_running("/a"), "this process, appending to nothing");
        {
            let _guard = RunningHere::new("/a");
            assert!(me.is_running("/a") && !me.is_running("/b"));
        }
        assert!(!me.is_running("/a"));
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let other = AppendRunner { pid: child.id(), start_ticks: start_ticks(child.id()).unwrap(), ..me.clone() };
        assert!(other.is_running("/a"));
        assert!(!AppendRunner { start_ticks: other.start_ticks + 1, ..other.clone() }.is_running("/a"), "pid reused");
        assert!(!AppendRunner { boot_id: "another boot".into(), ..other.clone() }.is_running("/a"));
        child.kill().unwrap();
        // Killed but not collected yet: a zombie, which runs nothing.
        for _ in 0..200 {
            if !other.is_running("/a") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!other.is_running("/a"), "a zombie");
        child.wait().unwrap();
        assert!(!other.is_running("/a"), "ended");
    }
}
