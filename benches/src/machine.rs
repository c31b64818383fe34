//! What a result was measured on: machine, commit, time.

use serde_json::{Value, json};

/// Cores, CPU model and memory, read from the OS.
pub fn describe() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split(':').nth(1)))
        .map_or_else(|| "unknown".to_string(), |m| m.trim().to_string());
    let mem_kib = proc_kib("/proc/meminfo", "MemTotal:").unwrap_or(0);
    json!({
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": model,
        "memory_gib": (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "os": std::env::consts::OS,
    })
}

/// A `<field> <n> kB` line of a /proc file (`/proc/meminfo`, `/proc/self/status`).
pub fn proc_kib(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|r| r.split_whitespace().next()?.parse().ok())
}

/// CPU time (user + system) of a process: `self` or a pid, from /proc.
pub fn cpu_time(pid: &str) -> std::time::Duration {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// Context switches (voluntary + involuntary) of every live thread of a
/// process, `self` or a pid (threads that already ended are not counted).
pub fn context_switches(pid: &str) -> u64 {
    threads(pid)
        .filter_map(|task| std::fs::read_to_string(task.join("status")).ok())
        .map(|status| {
            status
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("voluntary_ctxt_switches:").or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                })
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// CPU time of a process's live threads by name, digits dropped
/// (`rdk:broker1` and `rdk:broker2` are one `rdk:broker`).
pub fn thread_cpu(pid: &str) -> std::collections::BTreeMap<String, std::time::Duration> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in threads(pid) {
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else { continue };
        let name: String = comm.trim().chars().filter(|c| !c.is_ascii_digit()).collect();
        let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
        *by_name.entry(name).or_default() += stat_cpu(&stat);
    }
    by_name
}

fn threads(pid: &str) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten().map(|e| e.path())
}

/// utime + stime of a /proc `stat` line.
fn stat_cpu(stat: &str) -> std::time::Duration {
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15 (1-based).
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    std::time::Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// The cores this process may run on.
pub fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// CPU time the whole machine has spent busy (every core: user, nice,
/// system, irq, softirq, steal), from /proc/stat.
pub fn busy_time() -> std::time::Duration {
    cpu_ticks(&[0, 1, 2, 5, 6, 7])
}

/// The `cpu` line of /proc/stat, the fields at `which` summed (user nice
/// system idle iowait irq softirq steal …, in 10 ms ticks).
fn cpu_ticks(which: &[usize]) -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .map(|r| r.split_whitespace().filter_map(|f| f.parse().ok()).collect())
        .unwrap_or_default();
    let ticks: u64 = which.iter().filter_map(|&i| fields.get(i)).sum();
    std::time::Duration::from_millis(ticks * 10)
}

/// CPU time the hypervisor gave other guests while this one's had work
/// (`steal` in `/proc/stat`), over all cores.
pub fn steal_time() -> std::time::Duration {
    cpu_ticks(&[7])
}

/// How long at least one task waited on `resource` (`io`, `cpu`, `memory`)
/// in all (Linux pressure stall information, the `some` line's total); zero
/// where the kernel has none.
pub fn pressure(resource: &str) -> std::time::Duration {
    let text = std::fs::read_to_string(format!("/proc/pressure/{resource}")).unwrap_or_default();
    let micros = text
        .lines()
        .find(|l| l.starts_with("some "))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok())
        .unwrap_or(0);
    std::time::Duration::from_micros(micros)
}

/// Peak resident memory of this process, MiB.
pub fn peak_rss_mib() -> f64 {
    proc_kib("/proc/self/status", "VmHWM:").unwrap_or(0) as f64 / 1024.0
}

/// The commit the benchmark was built from (`unknown` outside a git tree),
/// with `+dirty` when the work tree had uncommitted changes.
pub fn git_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) if git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty()) => {
            format!("{commit}+dirty")
        }
        Some(commit) => commit,
        None => "unknown".into(),
    }
}

/// Current UTC time as `YYYYMMDDTHHMMSSZ`, for file names.
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_819), (2027, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
