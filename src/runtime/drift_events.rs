//! Drift found by events (`--drift-events-queue-url`): the leader long-polls the queue, and each
//! CloudTrail event someone else caused wakes the one Bucket or BucketAccess owning the bucket,
//! user or role it names, for a full pass. Names no object owns wake nothing and cost no AWS
//! read. A missed event waits for the periodic resync; a repeated one costs one pass that finds
//! nothing to do.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::lifecycle::wait_true;
use crate::aws::drift_queue::{self, DriftQueue, Event, Touched};
use crate::metrics::Metrics;

/// After a failed receive: the queue may be missing or not yet allowed; try again calmly.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Reads the queue until shutdown, sending what each event touched on `touched`.
pub(super) async fn poll(
    queue: DriftQueue,
    own: Vec<String>,
    touched: broadcast::Sender<Touched>,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) {
    loop {
        let received = tokio::select! {
            r = queue.receive() => r,
            _ = wait_true(shutdown.clone()) => return,
        };
        let messages = match received {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "reading the drift-event queue");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let mut receipts = Vec::with_capacity(messages.len());
        for (body, receipt) in messages {
            let outcome = match drift_queue::parse(&body, &own) {
                Event::Touched(t) => {
                    tracing::debug!(touched = ?t, "drift event");
                    // No receiver: no controller runs yet, and its first pass is a full one.
                    let _ = touched.send(t);
                    "touched"
                }
                Event::Own => "own",
                Event::Other => "other",
                Event::Refused => "refused",
            };
            metrics
                .drift_events_total
                .with_label_values(&[outcome])
                .inc();
            receipts.push(receipt);
        }
        if let Err(e) = queue.delete(receipts).await {
            tracing::warn!(error = %e, "deleting drift events read (they will be read again)");
        }
    }
}
