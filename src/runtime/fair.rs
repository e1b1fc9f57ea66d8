//! Fair share of a controller's reconcile slots across namespaces.
//!
//! kube's runner serves its queue first come, first served: a namespace that applies 600 Buckets
//! would hold every slot until its flood is through, and another namespace's one Bucket would wait
//! behind all of it. Here every triggered reconcile first enters a [`Gate`], which keeps one queue
//! per namespace and hands a freed slot to the next namespace in turn (round-robin), so a namespace
//! with one object waits for at most one slot per busier namespace, never for their backlog.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Admits at most `slots` reconciles at once, taking turns between namespaces.
#[derive(Clone)]
pub(super) struct Gate(Arc<Mutex<State>>);

struct State {
    /// Shutting down: no one waiting is admitted any more.
    closed: bool,
    free: usize,
    /// Per namespace, the reconciles waiting for a slot, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Slot>>>,
    /// The namespaces with someone waiting, in the order they get their next slot.
    turns: VecDeque<String>,
}

/// A reconcile slot; dropping it hands it to the next namespace in turn.
pub(super) struct Slot(Option<Gate>);

impl Gate {
    pub(super) fn new(slots: u16) -> Gate {
        Gate(Arc::new(Mutex::new(State {
            closed: false,
            free: usize::from(slots.max(1)),
            waiting: HashMap::new(),
            turns: VecDeque::new(),
        })))
    }

    /// Waits for a slot for a reconcile of an object in `namespace`; `None` once the gate is
    /// closed. Cancel-safe: a waiter dropped before its turn is skipped when the turn comes.
    pub(super) async fn enter(&self, namespace: &str) -> Option<Slot> {
        let rx = {
            let mut s = self.0.lock().expect("gate poisoned");
            if s.closed {
                return None;
            }
            if s.free > 0 && s.turns.is_empty() {
                s.free -= 1;
                return Some(Slot(Some(self.clone())));
            }
            let (tx, rx) = oneshot::channel();
            let s = &mut *s;
            let queue = s.waiting.entry(namespace.to_string()).or_default();
            if queue.is_empty() {
                s.turns.push_back(namespace.to_string());
            }
            queue.push_back(tx);
            // A slot may be free while others wait for their turn to be handed one: hand it now.
            if s.free > 0 {
                s.free -= 1;
                self.hand_on(s);
            }
            rx
        };
        // A sender is dropped unsent only when the gate closes.
        rx.await.ok()
    }

    /// At shutdown: reconciles still waiting for a slot never start (kube's runner drains what
    /// it started, and every waiting reconcile counts as started there), so draining takes as
    /// long as the reconciles already running, not the whole backlog.
    pub(super) fn close(&self) {
        let mut s = self.0.lock().expect("gate poisoned");
        s.closed = true;
        s.waiting.clear();
        s.turns.clear();
    }

    /// Gives a slot to the first live waiter of the next namespace in turn, or frees it.
    fn hand_on(&self, s: &mut State) {
        while let Some(ns) = s.turns.pop_front() {
            let Some(queue) = s.waiting.get_mut(&ns) else {
                continue;
            };
            let mut handed = false;
            while let Some(tx) = queue.pop_front() {
                match tx.send(Slot(Some(self.clone()))) {
                    Ok(()) => {
                        handed = true;
                        break;
                    }
                    // Its waiter was cancelled: the slot comes back, to hand to the next one
                    // (emptied first, so dropping it does not hand it on a second time).
                    Err(mut returned) => returned.0 = None,
                }
            }
            if queue.is_empty() {
                s.waiting.remove(&ns);
            } else {
                s.turns.push_back(ns);
            }
            if handed {
                return;
            }
        }
        s.free += 1;
    }

    #[cfg(test)]
    fn free(&self) -> usize {
        self.0.lock().expect("gate poisoned").free
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(gate) = self.0.take() {
            let mut s = gate.0.lock().expect("gate poisoned");
            gate.hand_on(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The order in which waiting reconciles get the one slot.
    async fn order(gate: &Gate, waiting: &[(&str, usize)]) -> Vec<String> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let first = gate.enter("busy").await.unwrap();
        for (ns, n) in waiting {
            for i in 0..*n {
                let (gate, tx, id) = (gate.clone(), tx.clone(), format!("{ns}{i}"));
                let ns = ns.to_string();
                tokio::spawn(async move {
                    let _slot = gate.enter(&ns).await;
                    tx.send(id).unwrap();
                });
                // Each waiter queues before the next (the gate keeps arrival order per namespace).
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        drop(first);
        let total: usize = waiting.iter().map(|(_, n)| n).sum();
        let mut got = vec![];
        for _ in 0..total {
            got.push(rx.recv().await.unwrap());
        }
        got
    }

    #[tokio::test]
    async fn a_flooding_namespace_waits_its_turn() {
        let gate = Gate::new(1);
        let got = order(&gate, &[("flood", 5), ("quiet", 1), ("other", 2)]).await;
        // Round-robin from the flood's first waiter on: the quiet namespace's only reconcile
        // comes second, not after the flood's backlog.
        assert_eq!(
            got,
            [
                "flood0", "quiet0", "other0", "flood1", "other1", "flood2", "flood3", "flood4"
            ]
        );
        assert_eq!(gate.free(), 1, "every slot came back");
    }

    #[tokio::test]
    async fn slots_are_bounded_and_cancelled_waiters_are_skipped() {
        let gate = Gate::new(2);
        let a = gate.enter("a").await.unwrap();
        let b = gate.enter("a").await.unwrap();
        assert_eq!(gate.free(), 0);
        let waiting = gate.enter("b");
        // Not admitted while both slots are held.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), waiting)
                .await
                .is_err(),
            "a third reconcile ran beside two"
        );
        // The cancelled waiter above is skipped: the next one gets the slot.
        let gate2 = gate.clone();
        let next = tokio::spawn(async move {
            let _s = gate2.enter("c").await;
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the live waiter got the freed slot")
            .unwrap();
        drop(b);
        assert_eq!(gate.free(), 2);
    }

    #[tokio::test]
    async fn closing_turns_away_the_waiting_and_the_new() {
        let gate = Gate::new(1);
        let running = gate.enter("a").await.unwrap();
        let gate2 = gate.clone();
        let waiting = tokio::spawn(async move { gate2.enter("b").await.is_none() });
        tokio::time::sleep(Duration::from_millis(10)).await;
        gate.close();
        assert!(
            tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("the waiter is let go at once")
                .unwrap(),
            "a waiting reconcile never starts after shutdown"
        );
        assert!(gate.enter("c").await.is_none());
        // The running reconcile finishes as usual.
        drop(running);
    }
}
