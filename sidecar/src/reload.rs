//! Files read again while serving (renewed certificates, changed keys, as a mounted Secret
//! changes): one loop for all of them.

use std::time::Duration;

/// Calls `reload` every `every`, after a first wait, until aborted. Reading files blocks, so each
/// call runs off the runtime's workers.
pub async fn every<F>(every: Duration, reload: F)
where
    F: Fn() + Clone + Send + 'static,
{
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(reload.clone()).await;
    }
}
