//! `version`: the client's version, and the server's last zxid when the
//! server answers within the timeout (an unreachable server is no error;
//! refused credentials are).

use serde_json::json;

use crate::output::{hex_id, Output};
use crate::Global;

pub async fn run(global: &Global, out: &Output) -> anyhow::Result<()> {
    let client_version = env!("CARGO_PKG_VERSION");
    let server = global.server();
    let server_zxid = match super::connect(global).await {
        Ok(client) => {
            // A sync makes the session see the server's newest write.
            let synced = client.sync("/").await;
            let zxid = client.last_zxid();
            client.close().await.ok();
            synced.ok().map(|()| zxid)
        }
        // An unreachable server is reported in the output; refused
        // credentials or unusable TLS files are the user's to fix.
        Err(err) if err.downcast_ref::<crate::error::Unreachable>().is_none() => return Err(err),
        Err(_) => None,
    };
    let document = json!({
        "client_version": client_version,
        "server": server,
        "server_last_zxid": server_zxid,
    });
    let mut human = format!("arbor {client_version}\n");
    match server_zxid {
        Some(zxid) => human.push_str(&format!("server {} last zxid {}\n", server, hex_id(zxid))),
        None => human.push_str(&format!("server {} not reachable\n", server)),
    }
    out.print(&document, &human)?;
    Ok(())
}
