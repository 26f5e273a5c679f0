//! Observers: one session per member, each watching every marker below
//! [`MARKERS`] (a persistent recursive watch) and recording when it first
//! saw each one deleted. An observer is pinned to its member, so while
//! that member is cut off or down it sees nothing; the others see the
//! deletion soon after it is committed, and the checks use the earliest
//! sighting, which is never earlier than the deletion itself.

use std::time::Duration;

use arbor_check::MarkerDeletion;
use tracing::debug;

use super::{marker_session, open_pinned, Context, MARKERS};
use crate::client::{Protocol, Session};

/// Pause before an observer opens a new session or watch.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Watches from member `member` (from 1) until the run stops.
pub async fn run(context: Context, member: usize, protocol: Protocol) {
    let server = context.servers.one(protocol, member);
    while !context.stop.is_cancelled() {
        let Some(opened) = open_pinned(&context, protocol, &server, RETRY_PAUSE).await else {
            return;
        };
        let Some(session) = opened else {
            continue;
        };
        tokio::select! {
            () = watch(&context, &session, member) => {}
            () = context.stop.cancelled() => {}
        }
        session.close().await;
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Records deletions seen through `session` until its watch ends.
async fn watch(context: &Context, session: &Session, member: usize) {
    let mut deletions = match session.watch_below(MARKERS).await {
        Ok(deletions) => deletions,
        Err(failure) => {
            debug!(member, %failure, "observer cannot watch yet");
            return;
        }
    };
    while let Some(path) = deletions.next().await {
        let Some(session) = marker_session(&path) else {
            continue;
        };
        let deletion = MarkerDeletion {
            session,
            seen_us: context.recorder.now_us(),
        };
        context
            .recorder
            .with(|history| history.marker_deletions.push(deletion));
    }
}
