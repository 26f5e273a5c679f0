//! A register worker: one session at a time (a new one when its session
//! expires), doing at random what clients of a coordination service do,
//! each answer recorded for the checks.

use std::time::Duration;

use arbor_check::linearizable::{Input, Operation, Output, Register};
use arbor_check::{ChildCreate, MarkerCheck, Observation};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{open_tracked, register_path, Context, Tracked, REGISTERS, SEQUENTIAL_PARENT};
use crate::client::{Failure, Kind, Protocol, Refusal};

/// Pause between a worker's requests, at most: several requests a second
/// per worker, spread over every fault.
const THINK_TIME_MAX: Duration = Duration::from_millis(40);

/// What one step does.
#[derive(Debug, Clone, Copy)]
enum Step {
    Read(u32),
    SyncedRead(u32),
    Write(u32),
    CompareAndSet(u32),
    Child,
    MarkerCheck,
}

fn pick(rng: &mut StdRng) -> Step {
    let key = rng.gen_range(0..REGISTERS);
    match rng.gen_range(0..100) {
        0..=24 => Step::Read(key),
        25..=44 => Step::SyncedRead(key),
        45..=64 => Step::Write(key),
        65..=79 => Step::CompareAndSet(key),
        80..=89 => Step::Child,
        _ => Step::MarkerCheck,
    }
}

/// Runs worker `process` until the run stops; returns its last session,
/// left open (the final state must show its marker).
pub async fn run(context: Context, process: u32, protocol: Protocol, seed: u64) -> Option<Tracked> {
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(process));
    let servers = context.servers.all(protocol);
    let mut writes = 0u64;
    while let Some(tracked) = open_tracked(&context, process, protocol, &servers).await {
        let mut worker = Worker {
            context: &context,
            tracked,
            process,
            versions: [0; REGISTERS as usize],
        };
        loop {
            if context.stop.is_cancelled() {
                return Some(worker.tracked);
            }
            let step = pick(&mut rng);
            writes += 1;
            let value = (u64::from(process) << 40) | writes;
            let stepped = tokio::select! {
                stepped = worker.step(step, value) => stepped,
                // An answer still owed is dropped: it is not recorded, as
                // if never asked (the history ends here).
                () = context.stop.cancelled() => return Some(worker.tracked),
            };
            if stepped.is_err() {
                super::expired(&context, &worker.tracked);
                break;
            }
            let think = rng.gen_range(Duration::ZERO..THINK_TIME_MAX);
            tokio::time::sleep(think).await;
        }
    }
    None
}

/// The session is gone.
struct Ended;

struct Worker<'a> {
    context: &'a Context,
    tracked: Tracked,
    process: u32,
    /// The last version this session saw of each register (for its
    /// compare-and-sets).
    versions: [i32; REGISTERS as usize],
}

impl Worker<'_> {
    async fn step(&mut self, step: Step, value: u64) -> Result<(), Ended> {
        match step {
            Step::Read(key) => self.read(key, false).await,
            Step::SyncedRead(key) => self.read(key, true).await,
            Step::Write(key) => self.write(key, None, value).await,
            Step::CompareAndSet(key) => {
                let expect = self.versions[key as usize];
                self.write(key, Some(expect), value).await
            }
            Step::Child => self.child().await,
            Step::MarkerCheck => self.marker_check().await,
        }
    }

    fn now_us(&self) -> u64 {
        self.context.recorder.now_us()
    }

    fn observe(&mut self, key: u32, version: i32, at_us: u64) {
        self.versions[key as usize] = version;
        let observation = Observation {
            process: self.process,
            session: self.tracked.session.id(),
            key,
            version,
            at_us,
        };
        self.context
            .recorder
            .with(|history| history.observations.push(observation));
    }

    /// Records an operation as sent, its outcome unknown until
    /// [`Self::answered`]: if the run stops first, it stays unknown.
    fn sent(&self, key: u32, input: Input, call: u64) -> usize {
        let op = Operation {
            key,
            input,
            output: Output::Unknown,
            call,
            ret: call,
        };
        self.context.recorder.with(|history| {
            history.registers.push(op);
            history.registers.len() - 1
        })
    }

    fn answered(&self, index: usize, output: Output, ret: u64) {
        self.context.recorder.with(|history| {
            let op = &mut history.registers[index];
            op.output = output;
            op.ret = ret;
        });
    }

    /// A read; with `synced`, `sync` first, and recorded as a register
    /// operation (a read without it is not linearizable, only ordered).
    async fn read(&mut self, key: u32, synced: bool) -> Result<(), Ended> {
        let path = register_path(key);
        let call = self.now_us();
        if synced {
            match self.tracked.session.sync(&path).await {
                Ok(()) => {}
                Err(Failure::Expired) => return Err(Ended),
                Err(_) => return Ok(()),
            }
        }
        let read = match self.tracked.session.get(&path).await {
            Ok(read) => read,
            Err(Failure::Expired) => return Err(Ended),
            Err(_) => return Ok(()),
        };
        let ret = self.now_us();
        self.observe(key, read.version, ret);
        if synced {
            self.context.recorder.heard(self.tracked.index, call);
            let register = Register {
                value: parse_value(&read.data),
                version: read.version,
            };
            let index = self.sent(key, Input::Read, call);
            self.answered(index, Output::Read(register), ret);
        }
        Ok(())
    }

    /// A write of `value`, or a compare-and-set with `expect`.
    async fn write(&mut self, key: u32, expect: Option<i32>, value: u64) -> Result<(), Ended> {
        let path = register_path(key);
        let input = match expect {
            Some(expect) => Input::Cas { expect, value },
            None => Input::Write { value },
        };
        let call = self.now_us();
        let index = self.sent(key, input, call);
        let answer = self
            .tracked
            .session
            .set(&path, value.to_string().as_bytes(), expect)
            .await;
        let ret = self.now_us();
        match answer {
            Ok(version) => {
                self.context.recorder.heard(self.tracked.index, call);
                self.observe(key, version, ret);
                self.answered(index, Output::Written { version }, ret);
            }
            Err(Failure::Refused(Refusal::BadVersion)) => {
                self.answered(index, Output::BadVersion, ret)
            }
            // Refused outright, or its session ended before it: it did
            // not happen, which "unknown" allows; or its outcome is
            // unknown indeed.
            Err(Failure::Expired) => return Err(Ended),
            Err(Failure::Refused(_) | Failure::Unknown(_)) => {}
        }
        Ok(())
    }

    async fn child(&mut self) -> Result<(), Ended> {
        let call_us = self.now_us();
        let sent = ChildCreate {
            process: self.process,
            call_us,
            ret_us: call_us,
            name: None,
            sequence: None,
        };
        // Unknown until answered: if the run stops first, it may exist.
        let index = self.context.recorder.with(|history| {
            history.children.push(sent);
            history.children.len() - 1
        });
        let prefix = format!("{SEQUENTIAL_PARENT}/c-");
        let answer = self
            .tracked
            .session
            .create(&prefix, b"", Kind::Sequential)
            .await;
        let ret_us = self.now_us();
        let name = match answer {
            Ok(path) => path.rsplit('/').next().map(str::to_owned),
            Err(Failure::Expired) => return Err(Ended),
            Err(_) => return Ok(()),
        };
        self.context.recorder.heard(self.tracked.index, call_us);
        let sequence = name.as_deref().and_then(sequence_of);
        self.context.recorder.with(|history| {
            let create = &mut history.children[index];
            create.ret_us = ret_us;
            create.name = name;
            create.sequence = sequence;
        });
        Ok(())
    }

    /// `sync`, then `exists` of the session's own marker.
    async fn marker_check(&mut self) -> Result<(), Ended> {
        let call_us = self.now_us();
        match self.tracked.session.sync(&self.tracked.marker).await {
            Ok(()) => {}
            Err(Failure::Expired) => return Err(Ended),
            Err(_) => return Ok(()),
        }
        let present = match self.tracked.session.exists(&self.tracked.marker).await {
            Ok(found) => found.is_some(),
            Err(Failure::Expired) => return Err(Ended),
            Err(_) => return Ok(()),
        };
        let ret_us = self.now_us();
        self.context.recorder.heard(self.tracked.index, call_us);
        let check = MarkerCheck {
            session: self.tracked.session.id(),
            call_us,
            ret_us,
            present,
        };
        self.context
            .recorder
            .with(|history| history.marker_checks.push(check));
        Ok(())
    }
}

/// A register's value, as the workload writes it (decimal); an empty
/// register (as created) is 0.
pub fn parse_value(data: &[u8]) -> u64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// The sequence number at the end of a sequential node's name.
fn sequence_of(name: &str) -> Option<u64> {
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    digits.parse().ok()
}
