//! The host gauges Triton exports beside its inference metrics: CPU utilization and memory
//! (Linux `/proc`, read as Triton reads them), and its pinned-memory pool, which the sidecar does
//! not have (so both of its gauges are 0, as Triton's are with the pool turned off).

use std::fmt::Write as _;

use parking_lot::Mutex;

/// Busy and total jiffies of all CPUs at the previous scrape: utilization is measured between
/// scrapes (Triton measures between its own polls).
static LAST_CPU: Mutex<Option<(u64, u64)>> = Mutex::new(None);

pub fn render(out: &mut String) {
    let gauge = |out: &mut String, name: &str, help: &str, value: String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {value}");
    };
    gauge(
        out,
        "nv_pinned_memory_pool_total_bytes",
        "Pinned memory pool total memory size, in bytes",
        "0".into(),
    );
    gauge(
        out,
        "nv_pinned_memory_pool_used_bytes",
        "Pinned memory pool used memory size, in bytes",
        "0".into(),
    );
    if let Some(utilization) = cpu_utilization() {
        gauge(
            out,
            "nv_cpu_utilization",
            "CPU utilization rate [0.0 - 1.0]",
            utilization.to_string(),
        );
    }
    if let Some((total, used)) = memory() {
        gauge(
            out,
            "nv_cpu_memory_total_bytes",
            "CPU total memory (RAM), in bytes",
            total.to_string(),
        );
        gauge(
            out,
            "nv_cpu_memory_used_bytes",
            "CPU used memory (RAM), in bytes",
            used.to_string(),
        );
    }
}

/// Busy over total time of all CPUs since the previous call (since boot on the first).
fn cpu_utilization() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let (busy, total) = cpu_times(&stat)?;
    let mut last = LAST_CPU.lock();
    let (busy0, total0) = last.replace((busy, total)).unwrap_or((0, 0));
    let (busy, total) = (busy.saturating_sub(busy0), total.saturating_sub(total0));
    Some(if total == 0 {
        0.0
    } else {
        busy as f64 / total as f64
    })
}

/// The `cpu` line of `/proc/stat`: idle is idle + iowait, busy the rest (user, nice, system,
/// irq, softirq, steal).
fn cpu_times(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((total - idle, total))
}

/// Total memory and memory in use (total less available), in bytes, from `/proc/meminfo`.
fn memory() -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let total = kib("MemTotal:")?;
    let available = kib("MemAvailable:")?;
    Some((total * 1024, total.saturating_sub(available) * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_line_is_read_as_busy_and_total() {
        let stat = "cpu  10 2 3 80 5 1 1 0 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        assert_eq!(cpu_times(stat), Some((17, 102)));
        assert_eq!(cpu_times("intr 1 2 3\n"), None);
    }

    #[test]
    fn gauges_are_rendered() {
        let mut out = String::new();
        render(&mut out);
        assert!(out.contains("nv_pinned_memory_pool_total_bytes 0\n"));
        let utilization = out
            .lines()
            .find_map(|l| l.strip_prefix("nv_cpu_utilization "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a utilization line");
        assert!((0.0..=1.0).contains(&utilization));
        assert!(out.contains("nv_cpu_memory_total_bytes "));
    }
}
