//! An operator's calls: the server's figures and listings, evicting a
//! session, and backups. Each needs ADMIN on `/` (open by default; the
//! superuser always has it), else [`Error::NoAuth`].

use arbor_protocol::{AdminCommand, BackupInfo, Op, OpResult, SessionId};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::{unexpected, Client};
use crate::connection::Effect;
use crate::error::Error;

/// Which page [`Client::server_report`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerReport {
    /// Figures: znodes, sessions, connections, requests by op, latency.
    Stat,
    /// The settings in force.
    Conf,
    /// Connections serving sessions, with their peers.
    Connections,
    /// Every session with its timeout, peer, ephemerals and watches.
    Sessions,
    /// Watch counts by kind.
    Watches,
}

impl Client {
    /// One of the server's reports, as a JSON document (the same as the
    /// admin port's `/commands/<name>`); ids are `"0x…"` strings.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// use arbor_client::ServerReport;
    /// let json = client.server_report(ServerReport::Sessions).await?;
    /// assert!(json.contains("\"sessions\""));
    /// # Ok(()) }
    /// ```
    pub async fn server_report(&self, report: ServerReport) -> Result<String, Error> {
        let command = match report {
            ServerReport::Stat => AdminCommand::Stat,
            ServerReport::Conf => AdminCommand::Conf,
            ServerReport::Connections => AdminCommand::Connections,
            ServerReport::Sessions => AdminCommand::Sessions,
            ServerReport::Watches => AdminCommand::Watches,
        };
        match self.admin(command).await? {
            OpResult::AdminReport(json) => Ok(json),
            other => Err(unexpected("admin", &other)),
        }
    }

    /// Ends another session as if it had expired, through the log: its
    /// ephemerals are deleted and its client gets
    /// [`Error::SessionExpired`]. For a stuck client that holds a lock.
    /// [`Error::NoNode`] if there is no such session.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let operator = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// let stuck = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// operator.evict_session(stuck.session_id()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn evict_session(&self, session_id: SessionId) -> Result<(), Error> {
        let command = AdminCommand::CloseSession { session_id };
        self.admin(command).await.map(|_| ())
    }

    /// Writes a backup of the whole state to `out`: a snapshot exact as of
    /// one zxid, taken without stopping the server, checked against its
    /// crc32c before this returns. `arbord restore FILE --data-dir DIR`
    /// starts a server from it.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// let mut file = Vec::new(); // or a tokio::fs::File
    /// let backup = client.backup(&mut file).await?;
    /// println!("{} nodes as of zxid {:#x}", backup.nodes, backup.zxid);
    /// assert_eq!(file.len() as u64, backup.bytes);
    /// # Ok(()) }
    /// ```
    pub async fn backup<W: AsyncWrite + Unpin>(&self, out: &mut W) -> Result<BackupInfo, Error> {
        let info = match self.admin(AdminCommand::BackupStart).await? {
            OpResult::BackupStarted(info) => info,
            other => return Err(unexpected("backup", &other)),
        };
        let io = |err: std::io::Error| Error::Io(std::sync::Arc::new(err));
        let (mut offset, mut crc) = (0u64, 0u32);
        while offset < info.bytes {
            let read = AdminCommand::BackupRead {
                id: info.id,
                offset,
            };
            let chunk = match self.admin(read).await? {
                OpResult::BackupChunk(chunk) => chunk,
                other => return Err(unexpected("backup", &other)),
            };
            if chunk.is_empty() {
                break;
            }
            crc = crc32c::crc32c_append(crc, &chunk);
            offset += chunk.len() as u64;
            out.write_all(&chunk).await.map_err(io)?;
        }
        out.flush().await.map_err(io)?;
        if offset != info.bytes || crc != info.crc32c {
            return Err(Error::Protocol(format!(
                "the backup arrived damaged: {offset} of {} bytes, crc32c {crc:#010x} instead of {:#010x}",
                info.bytes, info.crc32c
            )));
        }
        Ok(info)
    }

    async fn admin(&self, command: AdminCommand) -> Result<OpResult, Error> {
        self.call("", Op::Admin(command), Effect::None).await
    }
}
