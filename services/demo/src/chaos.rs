//! The chaos soak (`sluice-demo --chaos`): the faults each scenario test
//! makes one at a time, all in one run on the live-paced chain traffic:
//! a processor SIGKILLed every 10 s (and replaced), a rebalance storm
//! (three instances added and removed twice in quick succession), the
//! broker restarted, Redis restarted on its data, the active ingest
//! SIGKILLed and later SIGSTOPped past its lease, and Redis wiped (every
//! service must notice and stop) and then given its data back. The faults
//! run on a fixed timetable over the traffic's length; the processors'
//! choice of victim is seeded, so a run can be repeated.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_service::process::metric;

use crate::procs::{say, stack_script};
use crate::system::System;

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    KillProcessor,
    StormUp,
    StormDown,
    RestartBroker,
    RestartRedis,
    KillIngest,
    PauseIngest,
    ResumeIngest,
    WipeRedis,
}

/// A fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    /// Seconds since the traffic began.
    pub t: f64,
    pub fault: Fault,
    pub detail: String,
}

/// The soak's timetable and what it did.
pub struct Chaos {
    timetable: Vec<(Duration, Fault)>,
    next: usize,
    rng: u64,
    stack: PathBuf,
    /// The ingest instance SIGSTOPped, until it is resumed.
    paused: Option<usize>,
    pub applied: Vec<Applied>,
    /// Processes killed by the soak (the demo's own count of the faults).
    pub kills: usize,
}

/// What the soak did and what its checks found (in the demo's report).
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub faults: Vec<Applied>,
    pub kills: usize,
    /// Every fault of the timetable ran.
    pub finished: bool,
    pub outputs: Option<crate::outputs::Outputs>,
}

impl ChaosReport {
    pub fn passed(&self) -> bool {
        self.finished && self.outputs.as_ref().is_some_and(crate::outputs::Outputs::passed)
    }
}

/// Processors that must be running whatever the soak kills.
pub const PROCESSORS: u32 = 3;

impl Chaos {
    /// The timetable for traffic of `seconds` (at least 120: every fault
    /// needs its room).
    pub fn new(seconds: u64, stack: &Path) -> anyhow::Result<Self> {
        anyhow::ensure!(seconds >= 120, "--chaos needs --seconds of at least 120 (every fault needs room)");
        let s = |f: f64| Duration::from_secs_f64(seconds as f64 * f);
        let mut timetable: Vec<(Duration, Fault)> = (0..)
            .map(|i| Duration::from_secs(8 + 10 * i))
            .take_while(|t| *t + Duration::from_secs(10) < Duration::from_secs(seconds))
            .map(|t| (t, Fault::KillProcessor))
            .collect();
        let storm = s(0.22);
        timetable.extend([
            (storm, Fault::StormUp),
            (storm + Duration::from_secs(4), Fault::StormDown),
            (storm + Duration::from_secs(7), Fault::StormUp),
            (storm + Duration::from_secs(11), Fault::StormDown),
            (s(0.36), Fault::RestartBroker),
            (s(0.5), Fault::RestartRedis),
            (s(0.58), Fault::KillIngest),
            (s(0.66), Fault::PauseIngest),
            (s(0.66) + Duration::from_secs(8), Fault::ResumeIngest),
            (s(0.76), Fault::WipeRedis),
        ]);
        timetable.sort_by_key(|(t, _)| *t);
        Ok(Self {
            timetable,
            next: 0,
            rng: 0x5eed_c4a0_5eed_c4a0,
            stack: stack.to_path_buf(),
            paused: None,
            applied: Vec::new(),
            kills: 0,
        })
    }

    /// Applies every fault due by `elapsed`.
    pub async fn tick(&mut self, system: &mut System, elapsed: Duration) -> anyhow::Result<()> {
        while let Some(&(at, fault)) = self.timetable.get(self.next)
            && at <= elapsed
        {
            self.next += 1;
            let started = Instant::now();
            let detail = self.apply(system, fault).await?;
            let detail = format!("{detail} ({:.1} s)", started.elapsed().as_secs_f64());
            say(&format!("   chaos at {:.0} s: {fault:?}: {detail}", elapsed.as_secs_f64()));
            self.applied.push(Applied { t: elapsed.as_secs_f64(), fault, detail });
        }
        Ok(())
    }

    /// Every fault applied (the soak passes only if it ran its whole timetable).
    pub fn finished(&self) -> bool {
        self.next == self.timetable.len()
    }

    fn random(&mut self, n: usize) -> usize {
        // xorshift64*: enough to pick a victim reproducibly.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }

    async fn apply(&mut self, system: &mut System, fault: Fault) -> anyhow::Result<String> {
        Ok(match fault {
            Fault::KillProcessor => {
                let i = self.random(system.processors.len());
                let mut victim = system.processors.remove(i);
                victim.kill();
                self.kills += 1;
                system.start_processor()?;
                format!("SIGKILL {}, {} started", victim.name, system.processors.last().map_or("-", |p| &p.name))
            }
            Fault::StormUp => {
                for _ in 0..3 {
                    system.start_processor()?;
                }
                format!("{} processors", system.processors.len())
            }
            Fault::StormDown => {
                while system.processors.len() > PROCESSORS as usize {
                    let mut p = system.processors.remove(system.processors.len() - 1);
                    system.stopping.push(tokio::task::spawn_blocking(move || {
                        p.stop(Duration::from_secs(25));
                    }));
                }
                format!("back to {} (SIGTERM to the others)", system.processors.len())
            }
            Fault::RestartBroker => self.stack(&["restart", "kafka"]).await?,
            Fault::RestartRedis => self.stack(&["restart", "redis"]).await?,
            Fault::KillIngest => {
                let i = active_ingest(system).unwrap_or(0);
                let mut victim = system.ingest.remove(i);
                let name = victim.name.clone();
                victim.kill();
                self.kills += 1;
                system.start_ingest(ingest_index(&name))?;
                format!("SIGKILL the active {name}, started again")
            }
            Fault::PauseIngest => {
                let i = active_ingest(system).unwrap_or(0);
                system.ingest[i].signal("STOP");
                self.paused = Some(i);
                format!("SIGSTOP the active {} (past its 3 s lease)", system.ingest[i].name)
            }
            Fault::ResumeIngest => match self.paused.take() {
                Some(i) => {
                    system.ingest[i].signal("CONT");
                    format!("SIGCONT {}", system.ingest[i].name)
                }
                None => "nothing paused".into(),
            },
            Fault::WipeRedis => self.wipe(system).await?,
        })
    }

    /// `stack.sh ARGS` on the run's stack.
    async fn stack(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::process::Command::new(stack_script())
            .args(args)
            .env("SLUICE_STACK_DIR", &self.stack)
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "stack.sh {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(format!("stack.sh {}", args.join(" ")))
    }

    /// Redis restarted empty: every processor and scheduler, and the
    /// active ingest, must report that the store is not the one their state
    /// lives in (they stop writing); then Redis gets its data back and they
    /// must all report it is.
    async fn wipe(&mut self, system: &mut System) -> anyhow::Result<String> {
        self.stack(&["redis-wipe"]).await?;
        let noticed = wait_replaced(system, 1.0, Duration::from_secs(30)).await;
        self.stack(&["redis-restore"]).await?;
        let back = wait_replaced(system, 0.0, Duration::from_secs(30)).await;
        let noticed = noticed.map_err(|e| anyhow::anyhow!("Redis wiped: {e}"))?;
        let back = back.map_err(|e| anyhow::anyhow!("Redis restored: {e}"))?;
        Ok(format!(
            "every service stopped writing within {:.1} s and went on within {:.1} s of the restore",
            noticed.as_secs_f64(),
            back.as_secs_f64()
        ))
    }
}

/// The services that did not report a state store's change in time.
#[derive(Debug, thiserror::Error)]
#[error("not reported as {want} within {limit:?} by {}", .missing.join(", "))]
struct NotReported {
    want: f64,
    limit: Duration,
    missing: Vec<String>,
}

/// Waits until every processor and scheduler, and the active ingest, read
/// `want` on their `state_store_replaced` gauge; how long it took, or who did not.
async fn wait_replaced(system: &System, want: f64, limit: Duration) -> Result<Duration, NotReported> {
    let started = Instant::now();
    loop {
        let mut missing = Vec::new();
        let groups = [
            (&system.processors, "sluice_processor_state_store_replaced"),
            (&system.schedulers, "sluice_scheduler_state_store_replaced"),
        ];
        for (procs, gauge) in groups {
            for p in procs.iter() {
                let text = p.metrics();
                if text.is_empty() || metric(&text, gauge, "") != want {
                    missing.push(p.name.clone());
                }
            }
        }
        if let Some(i) = active_ingest(system) {
            let text = system.ingest[i].metrics();
            if metric(&text, "sluice_ingest_state_store_replaced", "") != want {
                missing.push(system.ingest[i].name.clone());
            }
        }
        if missing.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(NotReported { want, limit, missing });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn active_ingest(system: &System) -> Option<usize> {
    system.ingest.iter().position(|p| metric(&p.metrics(), "sluice_ingest_active", "") == 1.0)
}

fn ingest_index(name: &str) -> usize {
    name.rsplit('-').next().and_then(|i| i.parse().ok()).unwrap_or(0)
}
