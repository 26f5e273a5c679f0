//! Hosts in network namespaces on one bridge, and the partitions between them.
//!
//! A [`Lab`] of `n` hosts is `n` network namespaces, each with a veth whose
//! inside end is `eth0` (host `i` is `10.N.0.i/24`) and whose outside end is
//! a port of one bridge in the root namespace (`10.N.0.254/24`). The suite's
//! clients run in the root namespace and reach every host.
//!
//! The kernel here has no netfilter and no netem, so a partition is made
//! with policy routing: every host's `lookup local` rule is moved from
//! priority 0 to [`LOCAL_RULE_PREF`], and a cut adds, before it, a rule that
//! blackholes what arrives on `eth0` from the peer's address. The receiver
//! drops each packet at input routing, so open connections stall as well as
//! new ones (adding a rule flushes the routes TCP sockets cache), and ARP
//! between the two fails too. Rules are only ever added inside host
//! namespaces, so nothing cuts the root namespace off. Cuts are IPv4 only:
//! hosts have no IPv6 address beyond the link-local ones.
//!
//! Names carry the owner's pid, so leftovers of a process that died without
//! dropping its lab are recognised and removed by the next [`Lab::new`]:
//! * namespaces `arborlab-<pid>-<N>-<i>`;
//! * the bridge `a<pid>n<N>` and the outside veth ends `a<pid>n<N>h<i>`
//!   (at most 1 + 7 + 1 + 3 + 1 + 2 = 15 bytes, Linux's limit).
//!
//! Invariants:
//! * `N` is unique among the labs alive on the machine: it is chosen, under
//!   an exclusive lock on [`LOCK_PATH`], among second octets that no address
//!   or route of the root namespace uses, and its bridge address is set
//!   before the lock is released.
//! * Dropping a lab kills any process still in its namespaces, then removes
//!   the veths, the namespaces and the bridge.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// The most hosts a lab has: two digits in the veth names keep them within
/// Linux's 15-byte interface names.
pub const HOSTS_MAX: usize = 99;

/// The second octets a lab's `10.N.0.0/24` is chosen from.
pub const SUBNET_OCTETS: std::ops::RangeInclusive<u8> = 200..=254;

/// The last octet of the root namespace's address on the bridge.
pub const ROOT_HOST_OCTET: u8 = 254;

/// Held exclusively while a lab picks its subnet and claims it.
pub const LOCK_PATH: &str = "/run/arbor-faults-lab.lock";

/// The priority of the cut rules, before `lookup local`.
pub const CUT_RULE_PREF: &str = "10";

/// Where each host's `lookup local` rule moves to (from 0).
pub const LOCAL_RULE_PREF: &str = "100";

const NAMESPACE_PREFIX: &str = "arborlab-";

/// Why a lab could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("network labs need root (this process runs as uid {uid})")]
    NotRoot { uid: u32 },
    #[error("cannot run `{command}` (is iproute2 installed?): {source}")]
    IpMissing {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Ip {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("`{command}` printed what is not JSON: {source}")]
    Parse {
        command: String,
        source: serde_json::Error,
    },
    #[error("a lab has 1 to {HOSTS_MAX} hosts, not {hosts}")]
    Hosts { hosts: usize },
    #[error("no free subnet 10.N.0.0/24 with N in {first}..={last}", first = SUBNET_OCTETS.start(), last = SUBNET_OCTETS.end())]
    NoFreeSubnet,
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: &'static str,
        source: std::io::Error,
    },
}

/// `hosts` network namespaces joined by one bridge in the root namespace.
/// Host i (from 1) is 10.N.0.i/24 on its `eth0`; the root namespace has
/// 10.N.0.254 on the bridge, so a process in the root namespace (the suite's
/// clients) reaches every host and is never cut off by a partition.
#[derive(Debug)]
pub struct Lab {
    hosts: usize,
    /// N, the second octet.
    subnet: u8,
    bridge: String,
    bridge_made: bool,
    /// The namespaces made so far, host i at index i - 1.
    namespaces: Vec<String>,
    /// The pairs cut now, (low, high).
    cuts: Mutex<BTreeSet<(usize, usize)>>,
}

impl Lab {
    /// Ok if this process can make labs here (root, `ip` found, a namespace
    /// can be made and removed); else an error that says what is missing.
    pub fn check_available() -> Result<(), LabError> {
        // SAFETY: geteuid(2) has no arguments and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Err(LabError::NotRoot { uid });
        }
        run_ip(&["-V"])?;
        // Unique within the process too: tests check from several threads.
        static PROBES: AtomicU32 = AtomicU32::new(0);
        let probe = PROBES.fetch_add(1, Ordering::Relaxed);
        let probe = format!("{NAMESPACE_PREFIX}{}-check{probe}", std::process::id());
        run_ip(&["netns", "add", &probe])?;
        run_ip(&["netns", "del", &probe])?;
        Ok(())
    }

    /// Makes the namespaces, veths and bridge; first removes what earlier
    /// labs left behind whose owning process is gone (names carry the
    /// owner's pid).
    pub fn new(hosts: usize) -> Result<Lab, LabError> {
        if !(1..=HOSTS_MAX).contains(&hosts) {
            return Err(LabError::Hosts { hosts });
        }
        let _lock = lock_labs()?;
        remove_stale()?;
        let subnet = free_subnet()?;
        let mut lab = Lab {
            hosts,
            subnet,
            bridge: format!("a{}n{subnet}", std::process::id()),
            bridge_made: false,
            namespaces: Vec::with_capacity(hosts),
            cuts: Mutex::new(BTreeSet::new()),
        };
        // On an error `lab` is dropped, which removes what was made so far.
        lab.make_bridge()?;
        for host in 1..=hosts {
            lab.make_host(host)?;
        }
        tracing::info!(hosts, bridge = %lab.bridge, subnet = %format!("10.{subnet}.0.0/24"), "lab made");
        Ok(lab)
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// Host `host`'s address, `10.N.0.host`.
    pub fn ip(&self, host: usize) -> Ipv4Addr {
        self.check_host(host);
        let last = u8::try_from(host).expect("hosts are at most HOSTS_MAX");
        Ipv4Addr::new(10, self.subnet, 0, last)
    }

    pub fn namespace(&self, host: usize) -> &str {
        self.check_host(host);
        &self.namespaces[host - 1]
    }

    /// The bridge in the root namespace (for `ip` or `tcpdump` by hand).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// `ip netns exec <ns> <program>`: a Command whose process runs in host's
    /// namespace. `ip` execs `program` in place, so the child's pid is the
    /// program's.
    pub fn command(&self, host: usize, program: impl AsRef<OsStr>) -> Command {
        netns_command(self.namespace(host), program)
    }

    /// Drops every packet between hosts a and b, both ways, including
    /// packets of connections already open. Idempotent.
    pub fn cut(&self, a: usize, b: usize) -> Result<(), LabError> {
        let pair = self.pair(a, b);
        self.blackhole(a, b, "add")?;
        self.blackhole(b, a, "add")?;
        self.cuts_now().insert(pair);
        tracing::info!(a, b, "cut");
        Ok(())
    }

    /// Lets packets between hosts a and b through again. Idempotent.
    pub fn heal(&self, a: usize, b: usize) -> Result<(), LabError> {
        let pair = self.pair(a, b);
        self.blackhole(a, b, "del")?;
        self.blackhole(b, a, "del")?;
        self.cuts_now().remove(&pair);
        tracing::info!(a, b, "healed");
        Ok(())
    }

    /// Cuts `host` from every other host (not from the root namespace).
    pub fn isolate(&self, host: usize) -> Result<(), LabError> {
        self.check_host(host);
        (1..=self.hosts)
            .filter(|&other| other != host)
            .try_for_each(|other| self.cut(host, other))
    }

    pub fn heal_all(&self) -> Result<(), LabError> {
        self.cuts()
            .into_iter()
            .try_for_each(|(a, b)| self.heal(a, b))
    }

    /// The pairs cut now, (low, high).
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        self.cuts_now().iter().copied().collect()
    }

    fn make_bridge(&mut self) -> Result<(), LabError> {
        run_ip(&["link", "add", &self.bridge, "type", "bridge"])?;
        self.bridge_made = true;
        let root = format!("10.{}.0.{ROOT_HOST_OCTET}/24", self.subnet);
        run_ip(&["addr", "add", &root, "dev", &self.bridge])?;
        run_ip(&["link", "set", &self.bridge, "up"])?;
        Ok(())
    }

    /// Host `host`'s namespace, its veth on the bridge, its address, and its
    /// `lookup local` rule moved behind [`CUT_RULE_PREF`].
    fn make_host(&mut self, host: usize) -> Result<(), LabError> {
        let ns = format!(
            "{NAMESPACE_PREFIX}{}-{}-{host}",
            std::process::id(),
            self.subnet
        );
        run_ip(&["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        let outside = format!("{}h{host}", self.bridge);
        let peer = ["peer", "name", "eth0", "netns", &ns];
        run_ip(&[&["link", "add", &outside, "type", "veth"][..], &peer].concat())?;
        run_ip(&["link", "set", &outside, "master", &self.bridge, "up"])?;
        let address = format!("10.{}.0.{host}/24", self.subnet);
        run_ip(&["-n", &ns, "addr", "add", &address, "dev", "eth0"])?;
        run_ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        run_ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        run_ip(&[
            "-n",
            &ns,
            "rule",
            "add",
            "pref",
            LOCAL_RULE_PREF,
            "lookup",
            "local",
        ])?;
        run_ip(&["-n", &ns, "rule", "del", "pref", "0"])?;
        Ok(())
    }

    /// Adds (`add`) or removes (`del`) the rule in `at`'s namespace that
    /// drops what arrives from `from`; an existing rule on add, or a missing
    /// one on del, is not an error.
    fn blackhole(&self, at: usize, from: usize, action: &str) -> Result<(), LabError> {
        let peer = self.ip(from).to_string();
        let args = [
            "-n",
            self.namespace(at),
            "rule",
            action,
            "pref",
            CUT_RULE_PREF,
            "from",
            &peer,
            "iif",
            "eth0",
            "blackhole",
        ];
        match run_ip(&args) {
            Err(LabError::Ip { stderr, .. })
                if stderr.contains("File exists") || stderr.contains("No such file") =>
            {
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// (low, high) of two distinct hosts of this lab.
    fn pair(&self, a: usize, b: usize) -> (usize, usize) {
        self.check_host(a);
        self.check_host(b);
        assert_ne!(a, b, "a host cannot be cut from itself");
        (a.min(b), a.max(b))
    }

    fn check_host(&self, host: usize) {
        assert!(
            (1..=self.hosts).contains(&host),
            "host {host} is not in this lab of {} hosts",
            self.hosts
        );
    }

    fn cuts_now(&self) -> std::sync::MutexGuard<'_, BTreeSet<(usize, usize)>> {
        // The set is updated by single inserts and removes: never half-done.
        self.cuts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (index, ns) in self.namespaces.iter().enumerate() {
            let killed = kill_namespace_pids(ns);
            if killed > 0 {
                tracing::warn!(namespace = %ns, killed, "processes outlived their lab; killed");
            }
            // Deleting the veth now, not with the namespace (which the kernel
            // tears down later, in the background), leaves nothing behind by
            // the time drop returns.
            let veth = format!("{}h{}", self.bridge, index + 1);
            if let Err(error) = run_ip(&["link", "del", &veth]) {
                tracing::warn!(%veth, %error, "cannot remove a lab veth");
            }
            if let Err(error) = run_ip(&["netns", "del", ns]) {
                tracing::warn!(namespace = %ns, %error, "cannot remove a lab namespace");
            }
        }
        if self.bridge_made {
            if let Err(error) = run_ip(&["link", "del", &self.bridge]) {
                tracing::warn!(bridge = %self.bridge, %error, "cannot remove a lab bridge");
            }
        }
    }
}

/// `ip netns exec <namespace> <program>`, for those who keep a namespace's
/// name beyond the `Lab`'s borrow.
pub(crate) fn netns_command(namespace: &str, program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(ip_program());
    command.args(["netns", "exec", namespace]).arg(program);
    command
}

/// `ip` itself: in the sbin directories when a user's PATH lacks them.
fn ip_program() -> &'static OsStr {
    ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .map_or(OsStr::new("ip"), OsStr::new)
}

/// Runs `ip args...` and returns what it printed; a failure carries the
/// command line and `ip`'s stderr.
fn run_ip(args: &[&str]) -> Result<String, LabError> {
    let command = format!("ip {}", args.join(" "));
    let output = Command::new(ip_program())
        .args(args)
        .output()
        .map_err(|source| LabError::IpMissing {
            command: command.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(LabError::Ip {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `ip -j args...`, parsed; `ip` prints nothing for some empty lists.
fn run_ip_json(args: &[&str]) -> Result<Vec<serde_json::Value>, LabError> {
    let args = [&["-j"][..], args].concat();
    let text = run_ip(&args)?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(&text).map_err(|source| LabError::Parse {
        command: format!("ip {}", args.join(" ")),
        source,
    })
}

/// Every value of `field` in a list of JSON objects that are strings.
fn strings<'a>(items: &'a [serde_json::Value], field: &'a str) -> impl Iterator<Item = &'a str> {
    items
        .iter()
        .filter_map(move |item| item.get(field)?.as_str())
}

/// Locks [`LOCK_PATH`] exclusively; the lock goes with the returned file
/// (and with the process, if it dies).
fn lock_labs() -> Result<File, LabError> {
    let lock = |source| LabError::Lock {
        path: LOCK_PATH,
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .map_err(lock)?;
    file.lock().map_err(lock)?;
    Ok(file)
}

/// The first second octet in [`SUBNET_OCTETS`] that no address or route of
/// the root namespace uses.
fn free_subnet() -> Result<u8, LabError> {
    let links = run_ip_json(&["-4", "addr", "show"])?;
    let routes = run_ip_json(&["-4", "route", "show", "table", "all"])?;
    let addresses: Vec<serde_json::Value> = links
        .iter()
        .filter_map(|link| link.get("addr_info")?.as_array())
        .flatten()
        .cloned()
        .collect();
    let used: Vec<&str> = strings(&addresses, "local")
        .chain(strings(&routes, "dst"))
        .collect();
    SUBNET_OCTETS
        .into_iter()
        .find(|n| {
            let prefix = format!("10.{n}.");
            !used.iter().any(|used| used.starts_with(&prefix))
        })
        .ok_or(LabError::NoFreeSubnet)
}

/// Removes the bridges, veths and namespaces of labs whose owner is gone
/// (killing what still runs in those namespaces). A leftover that cannot be
/// removed is logged and skipped: it only keeps its subnet taken.
fn remove_stale() -> Result<(), LabError> {
    // Links first: deleting a veth takes its namespace's end along at once,
    // where deleting a namespace would leave the veth to a kernel worker.
    let links = run_ip_json(&["link", "show"])?;
    for link in strings(&links, "ifname") {
        if link_owner(link).and_then(owner_gone).unwrap_or(false) {
            log_stale_removal(link, run_ip(&["link", "del", link]));
        }
    }
    let namespaces = run_ip_json(&["netns", "list"])?;
    for ns in strings(&namespaces, "name") {
        let owner = ns
            .strip_prefix(NAMESPACE_PREFIX)
            .and_then(|rest| rest.split('-').next());
        if owner.and_then(owner_gone).unwrap_or(false) {
            kill_namespace_pids(ns);
            log_stale_removal(ns, run_ip(&["netns", "del", ns]));
        }
    }
    Ok(())
}

fn log_stale_removal(name: &str, result: Result<String, LabError>) {
    match result {
        Ok(_) => tracing::info!(name, "removed a dead process's lab leftover"),
        // Another process's Lab::new may have removed it first.
        Err(LabError::Ip { stderr, .. }) if stderr.contains("Cannot find device") => {}
        Err(error) => tracing::warn!(name, %error, "cannot remove a lab leftover"),
    }
}

/// The owner pid in an interface name `a<pid>n<N>` or `a<pid>n<N>h<i>`.
fn link_owner(name: &str) -> Option<&str> {
    let (pid, rest) = name.strip_prefix('a')?.split_once('n')?;
    let (subnet, host) = rest.split_once('h').unwrap_or((rest, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(subnet) && digits(host)).then_some(pid)
}

/// Whether the process `pid` is gone; None if `pid` is not a pid.
fn owner_gone(pid: &str) -> Option<bool> {
    let pid: u32 = pid.parse().ok()?;
    Some(!Path::new("/proc").join(pid.to_string()).exists())
}

/// SIGKILLs every process in namespace `ns`; returns how many.
fn kill_namespace_pids(ns: &str) -> usize {
    let pids = match run_ip(&["netns", "pids", ns]) {
        Ok(pids) => pids,
        Err(error) => {
            tracing::warn!(namespace = %ns, %error, "cannot list a namespace's processes");
            return 0;
        }
    };
    let pids: Vec<libc::pid_t> = pids
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect();
    for &pid in &pids {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    pids.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Interface names of labs parse back to their owner, and no others do.
    #[test]
    fn link_owner_reads_lab_names_only() {
        assert_eq!(link_owner("a4194304n254"), Some("4194304"));
        assert_eq!(link_owner("a4194304n254h99"), Some("4194304"));
        assert_eq!(link_owner("a4194304n254h99").map(str::len), Some(7));
        assert!("a4194304n254h99".len() <= 15);
        assert_eq!(link_owner("eth0"), None);
        assert_eq!(link_owner("anything"), None);
        assert_eq!(link_owner("a12n"), None);
        assert_eq!(link_owner("a12n3hx"), None);
    }
}
