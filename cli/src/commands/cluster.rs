//! `cluster status`: every server of `--server`, asked on its own, says who
//! it is, whom it follows and how far it has come; the leader adds how far
//! each member has confirmed the log (the lag). `cluster add` and
//! `cluster remove` change the membership online, through the leader.

use arbor_client::{Client, ClientOptions, ClusterStatus, MemberStatus};
use clap::Subcommand;
use serde_json::{json, Value};

use crate::error::Usage;
use crate::output::{table, Output};
use crate::Global;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Each server's view: member id, role, term, leader, applied index,
    /// and each member's lag behind the leader's log.
    Status,
    /// Add a running member (started with `arbord --join`): as a learner
    /// until it has caught up, then as a voter.
    Add {
        /// `ID=CLIENT_ADDR/PEER_ADDR`, as arbord's --member takes it.
        member: String,
    },
    /// Remove a member.
    Remove {
        /// The member's id.
        id: u64,
    },
}

pub async fn run(global: &Global, command: ClusterCommand, out: &Output) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Status => status(global, out).await,
        ClusterCommand::Add { member } => {
            let (id, addrs) = parse_member(&member)?;
            let client = super::connect(global).await?;
            let changed = client.add_member(id, &addrs.0, &addrs.1).await;
            client.close().await.ok();
            report(&changed?, out)
        }
        ClusterCommand::Remove { id } => {
            let client = super::connect(global).await?;
            let changed = client.remove_member(id).await;
            client.close().await.ok();
            report(&changed?, out)
        }
    }
}

/// `ID=CLIENT_ADDR/PEER_ADDR`.
fn parse_member(text: &str) -> anyhow::Result<(u64, (String, String))> {
    let parsed = text.split_once('=').and_then(|(id, addrs)| {
        let (client, peer) = addrs.split_once('/')?;
        let id = id.trim().parse::<u64>().ok().filter(|id| *id != 0)?;
        (!client.is_empty() && !peer.is_empty()).then(|| (id, (client.to_owned(), peer.to_owned())))
    });
    // The argument is checked here, not by clap: a usage error all the same.
    parsed.ok_or_else(|| {
        Usage {
            message: format!(
                "{text:?} is not ID=CLIENT_ADDR/PEER_ADDR (e.g. 4=127.0.0.1:7581/127.0.0.1:7591)"
            ),
        }
        .into()
    })
}

fn members_json(members: &[MemberStatus]) -> Value {
    members
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "client_addr": m.client_addr,
                "peer_addr": m.peer_addr,
                "voter": m.voter,
            })
        })
        .collect()
}

/// The membership after a change.
fn report(status: &ClusterStatus, out: &Output) -> anyhow::Result<()> {
    let mut rows = vec![["MEMBER", "CLIENT", "PEER", "VOTER"]
        .map(String::from)
        .to_vec()];
    for member in &status.members {
        rows.push(vec![
            member.id.to_string(),
            member.client_addr.clone(),
            member.peer_addr.clone(),
            if member.voter { "yes" } else { "learner" }.to_owned(),
        ]);
    }
    let document = json!({ "members": members_json(&status.members) });
    out.print(&document, &table(&rows))?;
    Ok(())
}

/// What one server said, or that it did not answer.
struct View {
    addr: String,
    status: Option<ClusterStatus>,
}

async fn ask(addr: &str, options: &ClientOptions) -> Option<ClusterStatus> {
    let client = Client::connect(addr, options.clone()).await.ok()?;
    let status = client.cluster_status().await.ok();
    client.close().await.ok();
    status
}

async fn status(global: &Global, out: &Output) -> anyhow::Result<()> {
    let server = global.server();
    let (options, _user) = super::client_options(global)?;
    let mut views = Vec::new();
    for addr in server.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        views.push(View {
            addr: addr.to_owned(),
            status: ask(addr, &options).await,
        });
    }
    if views.iter().all(|view| view.status.is_none()) {
        anyhow::bail!(crate::error::Unreachable { server });
    }
    // The lag comes from a leader's own view of the log.
    let leader = views
        .iter()
        .filter_map(|view| view.status.as_ref())
        .find(|status| status.member_id != 0 && status.leader == Some(status.member_id));
    let lag = |member_id: u64| -> Option<u64> {
        let leader = leader?;
        let last = leader.last_log_index?;
        let matched = leader
            .members
            .iter()
            .find(|member| member.id == member_id)?
            .matched_index;
        Some(last.saturating_sub(matched.unwrap_or(0)))
    };
    let show = |value: Option<u64>| value.map_or("-".to_owned(), |v| v.to_string());
    let mut rows = vec![[
        "SERVER", "MEMBER", "ROLE", "TERM", "LEADER", "APPLIED", "LAG",
    ]
    .map(String::from)
    .to_vec()];
    let mut documents: Vec<Value> = Vec::new();
    for view in &views {
        let Some(status) = &view.status else {
            // The leader still knows how far behind a silent member is.
            let member = leader.and_then(|leader| {
                leader
                    .members
                    .iter()
                    .find(|member| member.client_addr == view.addr)
            });
            let member_id = member.map(|member| member.id);
            let behind = member_id.and_then(lag);
            rows.push(vec![
                view.addr.clone(),
                show(member_id),
                "unreachable".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                show(behind),
            ]);
            documents.push(json!({
                "server": view.addr,
                "reachable": false,
                "member_id": member_id,
                "lag": behind,
            }));
            continue;
        };
        let role = match (status.member_id, status.leader) {
            (0, _) => "standalone",
            (me, Some(leader)) if me == leader => "leader",
            (_, Some(_)) => "follower",
            (_, None) => "no leader",
        };
        rows.push(vec![
            view.addr.clone(),
            status.member_id.to_string(),
            role.to_owned(),
            status.term.to_string(),
            show(status.leader),
            show(status.applied_index),
            show(lag(status.member_id)),
        ]);
        documents.push(json!({
            "server": view.addr,
            "reachable": true,
            "member_id": status.member_id,
            "role": role,
            "term": status.term,
            "leader": status.leader,
            "last_log_index": status.last_log_index,
            "applied_index": status.applied_index,
            "lag": lag(status.member_id),
            "members": members_json(&status.members),
        }));
    }
    let mut human = table(&rows);
    if let Some(leader) = leader {
        let missing: Vec<String> = leader
            .members
            .iter()
            .filter(|member| !views.iter().any(|view| view.addr == member.client_addr))
            .map(|member| format!("{} ({})", member.id, member.client_addr))
            .collect();
        if !missing.is_empty() {
            human.push_str(&format!(
                "not asked: member {}\n",
                missing.join(", member ")
            ));
        }
    }
    out.print(&Value::Array(documents), &human)?;
    Ok(())
}
