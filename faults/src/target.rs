//! What the suite runs its workload against: an Arbor ensemble, or Apache
//! ZooKeeper's (the control: the same workload and faults must pass
//! there), behind one set of operations for the nemesis.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::arbor::{ArborEnsemble, ArborOptions};
use crate::lab::Lab;
use crate::workload::Servers;
use crate::zookeeper::{ZkEnsemble, ZkTiming};

/// Which ensemble to start.
#[derive(Debug, Clone)]
pub enum TargetKind {
    Arbor(ArborOptions),
    ZooKeeper(ZkTiming),
}

impl TargetKind {
    /// The tick its session timeouts are counted in.
    pub fn tick_ms(&self) -> u32 {
        match self {
            TargetKind::Arbor(options) => options.tick_ms,
            TargetKind::ZooKeeper(timing) => timing.tick_ms,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            TargetKind::Arbor(_) => "arbor",
            TargetKind::ZooKeeper(_) => "zookeeper",
        }
    }
}

/// A running ensemble.
pub enum Target {
    Arbor(ArborEnsemble),
    ZooKeeper(ZkEnsemble),
}

impl Target {
    pub fn start(kind: &TargetKind, lab: &Lab, dir: &Path) -> Result<Target, String> {
        match kind {
            TargetKind::Arbor(options) => ArborEnsemble::start(lab, dir, options)
                .map(Target::Arbor)
                .map_err(|err| err.to_string()),
            TargetKind::ZooKeeper(timing) => ZkEnsemble::start(lab, dir, timing)
                .map(Target::ZooKeeper)
                .map_err(|err| err.to_string()),
        }
    }

    pub fn members(&self) -> usize {
        match self {
            Target::Arbor(ensemble) => ensemble.members(),
            Target::ZooKeeper(ensemble) => ensemble.servers(),
        }
    }

    /// Each member's client addresses.
    pub fn servers(&self) -> Servers {
        let members = 1..=self.members();
        match self {
            Target::Arbor(ensemble) => Servers {
                native: members
                    .clone()
                    .map(|m| ensemble.native_addr(m).to_string())
                    .collect(),
                zookeeper: members.map(|m| ensemble.zk_addr(m).to_string()).collect(),
            },
            Target::ZooKeeper(ensemble) => Servers {
                native: Vec::new(),
                zookeeper: members
                    .map(|m| ensemble.client_addr(m).to_string())
                    .collect(),
            },
        }
    }

    pub fn leader(&mut self) -> Option<usize> {
        match self {
            Target::Arbor(ensemble) => ensemble.leader(),
            Target::ZooKeeper(ensemble) => ensemble.leader(),
        }
    }

    /// Waits until a leader serves and every member that runs is in step;
    /// the leader.
    pub fn wait_serving(&mut self, timeout: Duration) -> Result<usize, String> {
        match self {
            Target::Arbor(ensemble) => ensemble.wait_serving(timeout).map_err(|e| e.to_string()),
            Target::ZooKeeper(ensemble) => {
                ensemble.wait_serving(timeout).map_err(|e| e.to_string())
            }
        }
    }

    pub fn kill9(&mut self, member: usize) {
        match self {
            Target::Arbor(ensemble) => ensemble.kill9(member),
            Target::ZooKeeper(ensemble) => ensemble.kill9(member),
        }
    }

    pub fn restart(&mut self, member: usize) -> Result<(), String> {
        match self {
            Target::Arbor(ensemble) => ensemble.restart(member).map_err(|e| e.to_string()),
            Target::ZooKeeper(ensemble) => ensemble.restart(member).map_err(|e| e.to_string()),
        }
    }

    pub fn pause(&mut self, member: usize) {
        match self {
            Target::Arbor(ensemble) => ensemble.pause(member),
            Target::ZooKeeper(ensemble) => ensemble.pause(member),
        }
    }

    pub fn resume(&mut self, member: usize) {
        match self {
            Target::Arbor(ensemble) => ensemble.resume(member),
            Target::ZooKeeper(ensemble) => ensemble.resume(member),
        }
    }

    /// Where member `member` logs.
    pub fn log_path(&self, member: usize) -> PathBuf {
        match self {
            Target::Arbor(ensemble) => ensemble.log_path(member),
            Target::ZooKeeper(ensemble) => ensemble.log_dir(member).join("zookeeper.log"),
        }
    }
}
