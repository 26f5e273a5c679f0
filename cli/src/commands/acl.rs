//! Access control: `getacl PATH`, `setacl [-v ACL_VERSION] PATH ACL`,
//! `whoami`, and `digest USER:PASSWORD` (offline). ACLs are written and
//! printed in zkCli's form, `scheme:id:perms` entries separated by commas;
//! [`AclList`] is the parsed argument, shared with `create --acl`.

use std::io::BufRead;

use anyhow::Context;
use arbor_client::acl::{digest_id, ACL_ENTRIES_MAX};
use arbor_client::{Acl, Client};
use clap::Args;
use serde_json::{json, Value};

use crate::error::Usage;
use crate::output::{self, Output};

/// An ACL as given on the command line: one or more comma-separated
/// `scheme:id:perms` entries, at most [`ACL_ENTRIES_MAX`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclList(pub Vec<Acl>);

impl AclList {
    /// Parses zkCli's syntax; the error names the first bad entry (clap
    /// shows it as a usage error).
    pub fn parse(text: &str) -> Result<AclList, String> {
        let mut entries = Vec::new();
        for entry in text.split(',').map(str::trim) {
            let acl = Acl::parse(entry).map_err(|err| format!("bad ACL entry '{entry}': {err}"))?;
            entries.push(acl);
        }
        if entries.len() > ACL_ENTRIES_MAX {
            return Err(format!(
                "{} ACL entries; at most {ACL_ENTRIES_MAX} are allowed",
                entries.len()
            ));
        }
        Ok(AclList(entries))
    }
}

#[derive(Debug, Args)]
pub struct GetAclArgs {
    /// The node whose ACL to print.
    pub(crate) path: String,
}

#[derive(Debug, Args)]
pub struct SetAclArgs {
    /// Only if the node's ACL version (`aversion`) is this one.
    #[arg(short = 'v', long, value_name = "ACL_VERSION")]
    version: Option<i32>,
    /// The node to change.
    pub(crate) path: String,
    /// The new ACL, such as `digest:alice:HASH:cdrwa,world:anyone:r`
    /// (`arbor digest` gives HASH; `auth::cdrwa` means this session's ids).
    #[arg(value_parser = AclList::parse)]
    acl: AclList,
}

#[derive(Debug, Args)]
pub struct DigestArgs {
    /// The credentials, or `-` to read them from the first line of stdin
    /// (out of sight of other users and of the shell's history).
    #[arg(value_name = "USER:PASSWORD")]
    credentials: String,
}

/// One ACL entry as JSON: `{"scheme", "id", "perms": "cdrwa"}`.
pub fn acl_json(acl: &Acl) -> Value {
    json!({
        "scheme": acl.id.scheme,
        "id": acl.id.id,
        "perms": acl.perms.to_string(),
    })
}

pub async fn run_get_acl(client: &Client, args: GetAclArgs, out: &Output) -> anyhow::Result<()> {
    let (acl, stat) = client.get_acl(&args.path).await?;
    let document = json!({
        "path": args.path,
        "acl": acl.iter().map(acl_json).collect::<Vec<_>>(),
        "aversion": stat.aversion,
    });
    let human: String = acl.iter().map(|entry| format!("{entry}\n")).collect();
    out.print(&document, &human)?;
    Ok(())
}

pub async fn run_set_acl(client: &Client, args: SetAclArgs, out: &Output) -> anyhow::Result<()> {
    let stat = client.set_acl(&args.path, args.acl.0, args.version).await?;
    let document = json!({"path": args.path, "stat": output::stat_json(&stat)});
    out.print(&document, &stat.aversion.to_string())?;
    Ok(())
}

pub async fn run_who_am_i(client: &Client, out: &Output) -> anyhow::Result<()> {
    let ids = client.who_am_i().await?;
    let document = json!({
        "ids": ids
            .iter()
            .map(|id| json!({"scheme": id.scheme, "id": id.id}))
            .collect::<Vec<_>>(),
    });
    let human: String = ids.iter().map(|id| format!("{id}\n")).collect();
    out.print(&document, &human)?;
    Ok(())
}

/// Prints the digest id of the credentials; no server is involved.
pub fn run_digest(args: DigestArgs, out: &Output) -> anyhow::Result<()> {
    let credentials = if args.credentials == "-" {
        read_credentials(&mut std::io::stdin().lock())?
    } else {
        args.credentials
    };
    // The password is never echoed back, even in the error.
    let id = digest_id(&credentials).map_err(|_| Usage {
        message: "digest takes USER:PASSWORD (a user name, a colon, the password)".to_owned(),
    })?;
    out.print(&json!({"id": id}), &id)?;
    Ok(())
}

/// The first line of `input`, without its line ending.
fn read_credentials(input: &mut impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .context("cannot read USER:PASSWORD from stdin")?;
    let trimmed = line.trim_end_matches(['\n', '\r']).len();
    line.truncate(trimmed);
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_client::Perms;

    // Proves ACL arguments parse in zkCli's syntax and a bad one names its entry.
    #[test]
    fn acl_arguments_parse_and_name_the_bad_entry() {
        let list = AclList::parse("digest:alice:x1Y=:cdrwa, world:anyone:r").expect("valid");
        assert_eq!(
            list.0,
            vec![
                Acl::new(Perms::ALL, "digest", "alice:x1Y="),
                Acl::new(Perms::READ, "world", "anyone"),
            ]
        );
        let err = AclList::parse("world:anyone:r,world:anyone:q").expect_err("bad perms");
        assert!(err.contains("'world:anyone:q'"), "{err}");
        let err = AclList::parse("world:anyone:r,,auth::cdrwa").expect_err("empty entry");
        assert!(err.starts_with("bad ACL entry ''"), "{err}");
        let many = vec!["world:anyone:r"; ACL_ENTRIES_MAX + 1].join(",");
        assert!(AclList::parse(&many).is_err());
    }

    // Proves `digest -` takes the first line of stdin, without its line ending.
    #[test]
    fn credentials_from_stdin_lose_their_newline() {
        let mut input = &b"super:test\r\nignored\n"[..];
        assert_eq!(read_credentials(&mut input).expect("read"), "super:test");
        let mut empty = &b""[..];
        assert_eq!(read_credentials(&mut empty).expect("read"), "");
    }
}
