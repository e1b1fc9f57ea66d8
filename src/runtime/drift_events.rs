//! Drift found by events (`--drift-events-queue-url`): the leader long-polls the queue, and each
//! CloudTrail event someone else caused wakes the one Bucket or BucketAccess owning the bucket,
//! user or role it names, in the account it happened in, for a full pass. Names no object owns
//! wake nothing and cost no AWS read. A missed event waits for the periodic resync; a repeated
//! one costs one pass that finds nothing to do. Each AWSAccount's rule forwards its events to the
//! operator's account's bus, whose rule delivers them to the same queue.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use tokio::sync::{broadcast, watch};

use super::lifecycle::wait_true;
use crate::api::AWSAccount;
use crate::aws::drift_queue::{self, DriftQueue, Event, Own, Touched};
use crate::reconcile::Context;
use crate::reconcile::accounts::session_arn;

/// After a failed receive: the queue may be missing or not yet allowed; try again calmly.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long the operator's sessions in the AWSAccounts are used before the AWSAccounts are
/// listed again (a Kubernetes read, no AWS call): an edited one counts within this.
const RELIST: Duration = Duration::from_secs(60);
/// How soon an event of an account none of them names lists them again: an AWSAccount just
/// added counts from its first events on.
const RELIST_UNSEEN: Duration = Duration::from_secs(5);

/// The operator's own writes, per account: its principal's patterns at home, and its session of
/// each AWSAccount's role, listed again as [`RELIST`] and [`RELIST_UNSEEN`] say.
struct OwnWrites {
    own: Own,
    /// The account ids the AWSAccounts name.
    members: HashSet<String>,
    listed: Option<Instant>,
}

impl OwnWrites {
    fn is_due(&self, accounts: impl IntoIterator<Item = String>, home: &str) -> bool {
        let Some(at) = self.listed else {
            return true;
        };
        at.elapsed() >= RELIST
            || (at.elapsed() >= RELIST_UNSEEN
                && accounts
                    .into_iter()
                    .any(|a| a != home && !self.members.contains(&a)))
    }

    async fn relist(&mut self, client: &kube::Client, cluster: &str) {
        self.listed = Some(Instant::now());
        match Api::<AWSAccount>::all(client.clone())
            .list(&Default::default())
            .await
        {
            Ok(list) => {
                let (sessions, members) = sessions_of(&list.items, cluster);
                self.own.sessions = sessions;
                self.members = members;
            }
            // The last list stands: an own write missed is one pass that finds nothing.
            Err(e) => tracing::warn!(error = %e, "listing the AWSAccounts for drift events"),
        }
    }
}

/// The operator's session ARN in each AWSAccount's account, and those accounts' ids.
fn sessions_of(accounts: &[AWSAccount], cluster: &str) -> (Vec<String>, HashSet<String>) {
    let arns = accounts.iter().map(|a| a.spec.role_arn.as_str());
    let sessions = arns
        .clone()
        .filter_map(|r| session_arn(r, cluster))
        .collect();
    let members = arns
        .filter_map(crate::reconcile::accounts::account_of)
        .map(str::to_string)
        .collect();
    (sessions, members)
}

/// Reads the queue until shutdown, sending what each event touched on `touched`.
pub(super) async fn poll(
    queue: DriftQueue,
    ctx: Arc<Context>,
    touched: broadcast::Sender<Touched>,
    shutdown: watch::Receiver<bool>,
) {
    let home = ctx.accounts.home().id.clone();
    let mut own = OwnWrites {
        own: Own {
            patterns: ctx.settings.operator_principals.clone(),
            sessions: Vec::new(),
        },
        members: HashSet::new(),
        listed: None,
    };
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
        let accounts = messages
            .iter()
            .filter_map(|(body, _)| drift_queue::account_of(body));
        if !messages.is_empty() && own.is_due(accounts, &home) {
            own.relist(&ctx.client, &ctx.settings.cluster_name).await;
        }
        let mut receipts = Vec::with_capacity(messages.len());
        for (body, receipt) in messages {
            let outcome = match drift_queue::parse(&body, &own.own) {
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
            ctx.metrics
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

#[cfg(test)]
mod tests {
    use super::*;

    fn account(role: &str) -> AWSAccount {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "s3.operator.dev/v1alpha1", "kind": "AWSAccount",
            "metadata": {"name": "a"},
            "spec": {"roleArn": role, "externalIdSecretRef": {"name": "s", "key": "k"}}}))
        .unwrap()
    }

    #[test]
    fn each_awsaccount_gives_the_operators_session_there() {
        let (sessions, members) = sessions_of(
            &[
                account("arn:aws:iam::222222222222:role/team/r"),
                account("arn:aws:iam::333333333333:role/r"),
            ],
            "c",
        );
        assert_eq!(
            sessions,
            [
                "arn:aws:sts::222222222222:assumed-role/r/s3-operator-c",
                "arn:aws:sts::333333333333:assumed-role/r/s3-operator-c",
            ]
        );
        assert_eq!(
            members,
            HashSet::from(["222222222222".into(), "333333333333".into()])
        );
    }

    /// Listed once at first, then again after a minute, or after 5 s for an event of an
    /// account no AWSAccount named (one added since): never per event.
    #[test]
    fn the_awsaccounts_are_listed_again_when_stale_or_for_an_unseen_account() {
        let mut own = OwnWrites {
            own: Own::default(),
            members: HashSet::from(["222222222222".to_string()]),
            listed: None,
        };
        let home = "111111111111";
        assert!(own.is_due([], home));
        own.listed = Some(Instant::now());
        let seen = ["111111111111".to_string(), "222222222222".to_string()];
        assert!(!own.is_due(seen.clone(), home));
        assert!(
            !own.is_due(["444444444444".to_string()], home),
            "just listed"
        );
        own.listed = Some(Instant::now() - RELIST_UNSEEN);
        assert!(own.is_due(["444444444444".to_string()], home));
        assert!(!own.is_due(seen.clone(), home));
        own.listed = Some(Instant::now() - RELIST);
        assert!(own.is_due(seen, home));
    }
}
