//! `--processor-cpu`: each local processor gets the CPU a pod with that limit gets, through a
//! control group of the demo's own (`sluice-demo-<pid>/<processor>`, cgroup v1's `cpu`
//! controller or v2's `cpu.max`), made when the processor starts and removed when the demo
//! ends. A CFS quota is what the kubelet writes for a container's CPU limit, so a processor
//! here drains at the rate a pod of that size would, and the demo's traffic can outgrow one.
//! Groups a killed demo left behind (their owner gone, no process in them) are removed first.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The CFS period the kubelet uses, µs.
const PERIOD_US: u64 = 100_000;

/// The demo's control group, with one child per processor.
#[derive(Debug)]
pub struct CpuLimit {
    dir: PathBuf,
    millis: u32,
    /// CPU time per period, µs (250m: 25,000 of 100,000).
    quota_us: u64,
    v2: bool,
}

impl CpuLimit {
    /// The demo's group under the `cpu` controller's hierarchy (`root`: /sys/fs/cgroup).
    pub fn new(root: &Path, millis: u32) -> anyhow::Result<Self> {
        anyhow::ensure!(millis > 0, "--processor-cpu must be above 0 (millicores, as a pod's limit)");
        let (base, v2) = if root.join("cpu/cpu.cfs_quota_us").exists() {
            (root.join("cpu"), false)
        } else if root.join("cgroup.controllers").exists() {
            (root.to_path_buf(), true)
        } else {
            anyhow::bail!(
                "no cpu controller under {} (cgroup v1 cpu/ or v2): run without --processor-cpu",
                root.display()
            )
        };
        remove_stale(&base);
        let dir = base.join(format!("sluice-demo-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating the control group {} (the demo needs root for it)", dir.display()))?;
        Ok(Self { dir, millis, quota_us: u64::from(millis) * PERIOD_US / 1000, v2 })
    }

    /// Puts the process `pid` (a processor named `name`) under the limit.
    pub fn limit(&self, name: &str, pid: u32) -> anyhow::Result<()> {
        let child = self.dir.join(name);
        std::fs::create_dir_all(&child).with_context(|| format!("creating {}", child.display()))?;
        let quota = self.quota_us;
        if self.v2 {
            std::fs::write(child.join("cpu.max"), format!("{quota} {PERIOD_US}"))?;
        } else {
            std::fs::write(child.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
            std::fs::write(child.join("cpu.cfs_quota_us"), quota.to_string())?;
        }
        std::fs::write(child.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {name} (pid {pid}) into {}", child.display()))
    }
}

impl CpuLimit {
    /// The limit, millicores.
    pub fn millis(&self) -> u32 {
        self.millis
    }
}

impl Drop for CpuLimit {
    /// Removes the groups (their processes have exited by now; a group still in use stays).
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// Removes `sluice-demo-<pid>` groups whose demo is gone and whose processes have exited.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix("sluice-demo-").and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&entry.path());
        }
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten().filter(|e| e.path().is_dir()) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_hierarchy_gets_the_kubelet_s_quota_and_the_group_goes_at_the_end() {
        // A stand-in for /sys/fs/cgroup: plain folders (the kernel's files are just written).
        let root = std::env::temp_dir().join(format!("sluice-demo-cpu-test-{}", std::process::id()));
        std::fs::create_dir_all(root.join("cpu")).expect("mkdir");
        std::fs::write(root.join("cpu/cpu.cfs_quota_us"), "-1").expect("write");
        let stale = root.join("cpu/sluice-demo-4000000");
        std::fs::create_dir_all(stale.join("processor-1")).expect("mkdir");
        let limit = CpuLimit::new(&root, 250).expect("a group");
        assert!(!stale.exists(), "a group whose demo is gone is removed");
        limit.limit("processor-1", 42).expect("limit");
        let child = limit.dir.join("processor-1");
        let read = |f: &str| std::fs::read_to_string(child.join(f)).expect("read");
        assert_eq!(
            (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"), read("cgroup.procs")),
            ("25000".into(), "100000".into(), "42".into())
        );
        // On a real hierarchy the kernel's files go with the folder; here they are plain files.
        for f in ["cpu.cfs_quota_us", "cpu.cfs_period_us", "cgroup.procs"] {
            std::fs::remove_file(child.join(f)).expect("rm");
        }
        let dir = limit.dir.clone();
        drop(limit);
        assert!(!dir.exists(), "the demo's group is removed when it ends");
        let _ = std::fs::remove_dir_all(&root);
        assert!(CpuLimit::new(&root, 250).is_err(), "no cpu controller: refused, naming the flag");
    }
}
