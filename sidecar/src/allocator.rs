//! glibc's malloc, told to keep the memory of large requests for the next one.
//!
//! A request with a tensor of megabytes allocates buffers of megabytes (the decoded message, the
//! tensor, the encoded answer) and frees them when it is answered. With glibc's defaults the
//! freed memory goes back to the kernel at once (the arena is trimmed above `trim_threshold`, or
//! the block was a mapping of its own above `mmap_threshold`), so the next request faults every
//! page in again and the kernel zeroes it: about a thousand page faults per 1M-element gRPC
//! request, and ~30 % of the rate (docs/performance/archive.md, "Allocator"). Raising both
//! thresholds keeps that memory in the process for reuse.
//!
//! glibc reads its tunables once, when the program starts, from `GLIBC_TUNABLES`; changing them
//! later needs `mallopt`, a foreign call this crate keeps out of its non-memory modules. So the
//! binary starts itself once more, before anything else runs, with the variable set: same process
//! id, arguments and environment otherwise. A user's own choice wins: when `GLIBC_TUNABLES`
//! already names either threshold nothing changes, and `INFERGATE_MALLOC_TUNING=off` keeps
//! glibc's defaults.

use std::ffi::OsString;

/// The thresholds: blocks up to 64 MiB come from the arenas, and an arena keeps up to 256 MiB
/// of free memory at its top before giving it back.
pub const TUNABLES: &[(&str, u64)] = &[
    ("glibc.malloc.mmap_threshold", 64 << 20),
    ("glibc.malloc.trim_threshold", 256 << 20),
];

/// Set to `off` to keep glibc's defaults.
pub const OPT_OUT_VAR: &str = "INFERGATE_MALLOC_TUNING";
const TUNABLES_VAR: &str = "GLIBC_TUNABLES";

/// What became of the tuning, for the log once logging is up.
#[derive(Debug)]
pub enum Tuning {
    /// The thresholds are in force (this process was started with them).
    Active,
    /// `GLIBC_TUNABLES` named a threshold already: the user's values are in force.
    UserSet,
    /// Turned off with `INFERGATE_MALLOC_TUNING=off`.
    Disabled,
    /// Not a glibc build: nothing to tune.
    NotGlibc,
    /// Starting again with the variable set failed; glibc's defaults are in force.
    Failed(String),
}

/// The value `GLIBC_TUNABLES` should have, or `None` when it should stay as it is: the user (or
/// an earlier start of this binary) named a threshold already.
pub fn tuned_value(current: Option<&str>) -> Option<String> {
    let current = current.unwrap_or("");
    let names_one = current.split(':').any(|entry| {
        let name = entry.split('=').next().unwrap_or("");
        TUNABLES.iter().any(|(tunable, _)| *tunable == name)
    });
    if names_one {
        return None;
    }
    let ours = our_entries().collect::<Vec<_>>().join(":");
    Some(if current.is_empty() {
        ours
    } else {
        format!("{current}:{ours}")
    })
}

/// Makes sure the process runs with the thresholds: returns when it does (or cannot), after
/// starting the binary again when it did not. Call it first thing in `main`, before any thread.
pub fn ensure_tuned() -> Tuning {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Tuning::NotGlibc;
    }
    if std::env::var_os(OPT_OUT_VAR).is_some_and(|v| v == "off") {
        return Tuning::Disabled;
    }
    let current = std::env::var_os(TUNABLES_VAR);
    let current = match current.as_ref().map(|v| v.to_str()) {
        None => None,
        Some(Some(text)) => Some(text),
        // Not text: the user's, left as it is.
        Some(None) => return Tuning::UserSet,
    };
    match tuned_value(current) {
        Some(value) => Tuning::Failed(restart_with(TUNABLES_VAR, &value)),
        None if current.is_some_and(has_ours) => Tuning::Active,
        None => Tuning::UserSet,
    }
}

/// Whether every threshold is set to our value.
fn has_ours(tunables: &str) -> bool {
    our_entries().all(|entry| tunables.split(':').any(|e| e == entry))
}

/// Our thresholds as `GLIBC_TUNABLES` entries, `name=value`.
fn our_entries() -> impl Iterator<Item = String> {
    TUNABLES
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
}

/// Replaces this process with the same binary and arguments, one variable changed. Returns only
/// when that fails, with the reason.
#[cfg(unix)]
fn restart_with(var: &str, value: &str) -> String {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return format!("cannot find this binary: {e}"),
    };
    let mut args = std::env::args_os();
    let arg0: OsString = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let error = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(var, value)
        .exec();
    format!("cannot start {} again: {error}", exe.display())
}

#[cfg(not(unix))]
fn restart_with(_var: &str, _value: &str) -> String {
    "not supported on this platform".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456";

    #[test]
    fn an_empty_or_missing_variable_gets_both_thresholds() {
        assert_eq!(tuned_value(None).as_deref(), Some(OURS));
        assert_eq!(tuned_value(Some("")).as_deref(), Some(OURS));
    }

    #[test]
    fn other_tunables_are_kept() {
        assert_eq!(
            tuned_value(Some("glibc.malloc.arena_max=2")),
            Some(format!("glibc.malloc.arena_max=2:{OURS}"))
        );
    }

    #[test]
    fn a_threshold_named_by_the_user_wins() {
        assert_eq!(tuned_value(Some("glibc.malloc.trim_threshold=0")), None);
        assert_eq!(
            tuned_value(Some(
                "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=1"
            )),
            None
        );
        // Once started with our value, nothing changes again: no second restart.
        assert_eq!(tuned_value(Some(OURS)), None);
    }

    #[test]
    fn a_name_that_only_contains_a_threshold_is_not_one() {
        assert!(tuned_value(Some("x.glibc.malloc.trim_threshold=1")).is_some());
    }
}
