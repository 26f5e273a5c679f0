//! `--config FILE`: settings from a TOML file, each key a flag's name with
//! `_` for `-` (`data_dir`, `max_connections_per_ip`, `4lw`). The file is
//! read as if its keys were flags given after the command line's, and a
//! flag the command line gives wins: one parser, one set of defaults and
//! one validation for both. A key that is not a flag is refused by name,
//! so a typo cannot leave a setting at its default unnoticed.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{bail, Context};
use clap::error::{ContextKind, ContextValue};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory};

use crate::args::Args;

/// Flags that are actions, not settings: not keys of the file.
const NOT_SETTINGS: [&str; 4] = ["config", "verify", "help", "version"];

/// Largest file read: settings, not data.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// The file's settings as command-line arguments, leaving out the flags
/// `given` already sets on the command line.
pub fn arguments(
    path: &Path,
    command: &Command,
    given: &ArgMatches,
) -> anyhow::Result<Vec<OsString>> {
    let text = read(path)?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut arguments = Vec::new();
    for (key, value) in &table {
        let arg = setting(command, key).with_context(|| format!("{}", path.display()))?;
        let id = arg.get_id().as_str();
        if given.value_source(id) == Some(ValueSource::CommandLine) {
            continue;
        }
        let flag = format!("--{}", arg.get_long().unwrap_or(key));
        let takes_value = arg.get_action().takes_values();
        let values = match value {
            toml::Value::Array(items)
                if arg.get_num_args().is_some_and(|n| n.max_values() > 1) || is_repeated(arg) =>
            {
                items.iter().collect::<Vec<_>>()
            }
            toml::Value::Array(_) => {
                bail!("{}: `{key}` takes one value, not a list", path.display())
            }
            one => vec![one],
        };
        for value in values {
            match (value, takes_value) {
                (toml::Value::Boolean(on), false) => {
                    if *on {
                        arguments.push(OsString::from(&flag));
                    }
                }
                (_, false) => bail!(
                    "{}: `{key}` is a switch: write `{key} = true` or `{key} = false`",
                    path.display()
                ),
                (value, true) => {
                    let text = scalar(value).with_context(|| {
                        format!("{}: `{key}` wants a string or a number", path.display())
                    })?;
                    arguments.push(OsString::from(&flag));
                    arguments.push(OsString::from(text));
                }
            }
        }
    }
    Ok(arguments)
}

fn read(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    if meta.len() > CONFIG_FILE_BYTES_MAX {
        bail!(
            "{} is {} bytes; a config file holds settings, at most {CONFIG_FILE_BYTES_MAX} bytes",
            path.display(),
            meta.len()
        );
    }
    std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))
}

/// The flag a key names.
fn setting<'a>(command: &'a Command, key: &str) -> anyhow::Result<&'a clap::Arg> {
    let long = key.replace('_', "-");
    let found = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long.as_str()));
    match found {
        Some(arg) if !NOT_SETTINGS.contains(&arg.get_id().as_str()) => Ok(arg),
        Some(_) => bail!("`{key}` is an action, not a setting: give it on the command line"),
        None => bail!(
            "unknown key `{key}`: the keys are arbord's flags with _ for - (`arbord --help` lists them)"
        ),
    }
}

/// Whether the flag may be given more than once (`--member`).
fn is_repeated(arg: &clap::Arg) -> bool {
    matches!(arg.get_action(), clap::ArgAction::Append)
}

/// A value as it would be written on the command line.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(text) => Some(text.clone()),
        toml::Value::Integer(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Says what clap refused in the command line and the file together,
/// naming the file's key when the flag it refused came from there.
pub fn explain(err: &clap::Error, path: &Path, given: &ArgMatches) -> anyhow::Error {
    let message = err.to_string();
    let first = message.lines().next().unwrap_or_default();
    let first = first.trim_start_matches("error: ");
    let flag = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(flag)) => flag.split([' ', '=']).next().map(str::to_owned),
        _ => None,
    };
    let from_file = flag.as_deref().and_then(|flag| {
        let long = flag.strip_prefix("--")?;
        let arg = Args::command()
            .get_arguments()
            .find(|arg| arg.get_long() == Some(long))?
            .clone();
        let on_command_line =
            given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine);
        (!on_command_line).then(|| long.replace('-', "_"))
    });
    match from_file {
        Some(key) => anyhow::anyhow!("{}: `{key}`: {first}", path.display()),
        None => anyhow::anyhow!("{} with the command line: {first}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    /// Parses `flags`, then the file `toml`, as arbord does.
    fn parse(flags: &[&str], toml: &str) -> anyhow::Result<Args> {
        let dir = tempdir();
        let path = dir.join("arbor.toml");
        std::fs::write(&path, toml).expect("written");
        let argv: Vec<OsString> = std::iter::once("arbord")
            .chain(flags.iter().copied())
            .map(OsString::from)
            .collect();
        let parsed = parse_file(&path, argv);
        // The file has been read by now, pass or fail; leave nothing in /tmp.
        let _ = std::fs::remove_dir_all(&dir);
        parsed
    }

    fn parse_file(path: &Path, mut argv: Vec<OsString>) -> anyhow::Result<Args> {
        let command = Args::command();
        let given = command.clone().try_get_matches_from(&argv)?;
        argv.extend(arguments(path, &command, &given)?);
        let matches = Args::command()
            .try_get_matches_from(&argv)
            .map_err(|err| explain(&err, path, &given))?;
        Ok(Args::from_arg_matches(&matches)?)
    }

    fn tempdir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "arbord-config-test-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// The file key of every flag that is a setting.
    fn setting_keys() -> Vec<String> {
        Args::command()
            .get_arguments()
            .filter(|arg| !NOT_SETTINGS.contains(&arg.get_id().as_str()))
            .map(|arg| {
                arg.get_long()
                    .expect("every flag is long")
                    .replace('-', "_")
            })
            .collect()
    }

    /// Every setting, as the file writes it, and the same as flags.
    const EVERY_SETTING: &str = r#"
log_level = "debug"
log_format = "json"
listen = "127.0.0.1:17181"
zk_listen = "off"
admin_listen = "127.0.0.1:17182"
4lw = "ruok,mntr"
tls_listen = "127.0.0.1:17183"
tls_cert = "/etc/arbor/cert.pem"
tls_key = "/etc/arbor/key.pem"
tls_client_ca = "/etc/arbor/ca.pem"
peer_tls_cert = "/etc/arbor/peer.pem"
peer_tls_key = "/etc/arbor/peer-key.pem"
peer_tls_ca = "/etc/arbor/peer-ca.pem"
member_id = 2
member = ["1=127.0.0.1:7181/127.0.0.1:7191", "2=127.0.0.1:7281/127.0.0.1:7291"]
join = true
data_dir = "/var/lib/arbor"
tick_ms = 500
max_frame_bytes = 2097152
max_data_bytes = 1048576
max_connections = 100
max_connections_per_ip = 10
reap_interval_ms = 250
exit_on_stdin_close = true
fsync = "never"
snap_count = 5000
snap_tree_percent = 50
super_digest = "admin:x/LWd8hIZYH0XIP6rR1qYM8vvm4="
snap_retain = 5
segment_bytes = 1048576
worker_threads = 3
idle_spin_us = 250
"#;

    const EVERY_FLAG: &[&str] = &[
        "--log-level",
        "debug",
        "--log-format",
        "json",
        "--listen",
        "127.0.0.1:17181",
        "--zk-listen",
        "off",
        "--admin-listen",
        "127.0.0.1:17182",
        "--4lw",
        "ruok,mntr",
        "--tls-listen",
        "127.0.0.1:17183",
        "--tls-cert",
        "/etc/arbor/cert.pem",
        "--tls-key",
        "/etc/arbor/key.pem",
        "--tls-client-ca",
        "/etc/arbor/ca.pem",
        "--peer-tls-cert",
        "/etc/arbor/peer.pem",
        "--peer-tls-key",
        "/etc/arbor/peer-key.pem",
        "--peer-tls-ca",
        "/etc/arbor/peer-ca.pem",
        "--member-id",
        "2",
        "--member",
        "1=127.0.0.1:7181/127.0.0.1:7191",
        "--member",
        "2=127.0.0.1:7281/127.0.0.1:7291",
        "--join",
        "--data-dir",
        "/var/lib/arbor",
        "--tick-ms",
        "500",
        "--max-frame-bytes",
        "2097152",
        "--max-data-bytes",
        "1048576",
        "--max-connections",
        "100",
        "--max-connections-per-ip",
        "10",
        "--reap-interval-ms",
        "250",
        "--exit-on-stdin-close",
        "--fsync",
        "never",
        "--snap-count",
        "5000",
        "--snap-tree-percent",
        "50",
        "--super-digest",
        "admin:x/LWd8hIZYH0XIP6rR1qYM8vvm4=",
        "--snap-retain",
        "5",
        "--segment-bytes",
        "1048576",
        "--worker-threads",
        "3",
        "--idle-spin-us",
        "250",
    ];

    // Proves every flag that is a setting can be set from the file, to the
    // same effect as on the command line, and that the test's file names
    // every one of them (a new flag must be added here).
    #[test]
    fn every_setting_can_come_from_the_file() {
        let from_file = parse(&[], EVERY_SETTING).expect("valid file");
        let from_flags = parse(EVERY_FLAG, "").expect("valid flags");
        assert_eq!(format!("{from_file:?}"), format!("{from_flags:?}"));
        let defaults = parse(&[], "").expect("no settings");
        assert_ne!(format!("{from_file:?}"), format!("{defaults:?}"));
        let table: toml::Table = toml::from_str(EVERY_SETTING).expect("TOML");
        for key in setting_keys() {
            assert!(
                table.contains_key(&key),
                "the test file does not set `{key}`"
            );
        }
    }

    // Proves a flag on the command line wins over the file.
    #[test]
    fn the_command_line_wins() {
        let args = parse(&["--tick-ms", "700"], "tick_ms = 500\nsnap_retain = 9\n").expect("valid");
        let text = format!("{args:?}");
        assert!(text.contains("tick_ms: 700"), "{text}");
        assert!(text.contains("snap_retain: 9"), "{text}");
    }

    // Proves an unknown key, a bad value and an action are refused by name.
    #[test]
    fn bad_keys_and_values_are_named() {
        let err = parse(&[], "tick_ms = 500\ntickms = 3\n").expect_err("a typo");
        assert!(
            format!("{err:#}").contains("unknown key `tickms`"),
            "{err:#}"
        );
        let err = parse(&[], "tick_ms = \"soon\"\n").expect_err("not a number");
        let text = format!("{err:#}");
        assert!(text.contains("`tick_ms`: invalid value 'soon'"), "{text}");
        let err = parse(&[], "4lw = \"ruok,rouk\"\n").expect_err("not a word");
        assert!(format!("{err:#}").contains("\"rouk\""), "{err:#}");
        let err = parse(&[], "verify = true\n").expect_err("an action");
        assert!(
            format!("{err:#}").contains("`verify` is an action"),
            "{err:#}"
        );
        let err = parse(&[], "join = \"yes\"\n").expect_err("a switch");
        assert!(format!("{err:#}").contains("`join` is a switch"), "{err:#}");
        let err = parse(&[], "tick_ms = [1, 2]\n").expect_err("one value");
        assert!(format!("{err:#}").contains("takes one value"), "{err:#}");
        let err = parse(&[], "tick_ms = 500\n[x]\n").expect_err("a table");
        assert!(format!("{err:#}").contains("unknown key `x`"), "{err:#}");
    }

    // Proves the shipped example is a valid file, and that it mentions
    // every setting (commented out or not), so it stays the reference.
    #[test]
    fn the_example_file_is_valid_and_complete() {
        let example = include_str!("../../../../deploy/arbor.toml");
        parse(&[], example).expect("the example as shipped");
        // A key is mentioned when a line, commented or not, sets it.
        let mentioned: std::collections::HashSet<&str> = example
            .lines()
            .map(|line| line.strip_prefix("# ").unwrap_or(line))
            .filter_map(|line| line.split_once(" = ").map(|(key, _)| key))
            .filter(|key| key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        for key in setting_keys() {
            assert!(
                mentioned.contains(key.as_str()),
                "deploy/arbor.toml does not mention `{key}`"
            );
        }
    }
}
