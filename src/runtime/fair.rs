//! Fair share of a controller's reconcile slots across namespaces.
//!
//! kube's scheduler serves its queue first come, first served: a namespace that applies 600
//! Buckets would hold every slot until its flood is through, and another namespace's one Bucket
//! would wait behind all of it. Here the objects triggers name wait in [`Turns`], one queue per
//! namespace, and go to kube's runner a few at a time, each namespace in turn; there each
//! reconcile enters a [`Gate`], which hands a freed slot to the next namespace in turn
//! (round-robin) too, so a namespace with one object waits for at most one slot per busier
//! namespace, never for their backlog.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::stream::{BoxStream, Fuse};
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::oneshot;

/// The objects triggers name, handed to kube's runner at most `limit` at a time and taking
/// turns between namespaces. kube's runner spawns every object it is handed and polls each of
/// them whenever any one finishes, so a flood handed over whole costs work per completion that
/// grows with the flood (most of the operator's CPU at 5,000 pairs); here the rest wait as a name
/// in their namespace's queue. An object named again while it waits stays one entry; one named
/// while the runner has it waits until the runner is done with it ([`Finished::done`]), as
/// kube's scheduler would hold it.
pub(super) struct Turns<K: Resource> {
    upstream: Fuse<BoxStream<'static, ObjectRef<K>>>,
    state: Arc<Mutex<Queued<K>>>,
}

/// Tells [`Turns`] that the runner is done with an object.
pub(super) struct Finished<K: Resource>(Arc<Mutex<Queued<K>>>);

struct Queued<K: Resource> {
    limit: usize,
    /// Handed to the runner and not reported done.
    out: HashSet<ObjectRef<K>>,
    /// Named again while out: queued again once done.
    again: HashSet<ObjectRef<K>>,
    /// In a namespace's queue.
    queued: HashSet<ObjectRef<K>>,
    waiting: HashMap<String, VecDeque<ObjectRef<K>>>,
    /// The namespaces with objects waiting, in the order they hand on their next one.
    turns: VecDeque<String>,
    waker: Option<Waker>,
}

impl<K> Turns<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    pub(super) fn new(
        upstream: BoxStream<'static, ObjectRef<K>>,
        limit: usize,
    ) -> (Turns<K>, Finished<K>) {
        let state = Arc::new(Mutex::new(Queued {
            limit: limit.max(1),
            out: HashSet::new(),
            again: HashSet::new(),
            queued: HashSet::new(),
            waiting: HashMap::new(),
            turns: VecDeque::new(),
            waker: None,
        }));
        let turns = Turns {
            upstream: upstream.fuse(),
            state: state.clone(),
        };
        (turns, Finished(state))
    }
}

impl<K: Resource<DynamicType = ()>> Queued<K> {
    fn push(&mut self, r: ObjectRef<K>) {
        if self.out.contains(&r) {
            self.again.insert(r);
            return;
        }
        if !self.queued.insert(r.clone()) {
            return;
        }
        let ns = r.namespace.clone().unwrap_or_default();
        let queue = self.waiting.entry(ns.clone()).or_default();
        if queue.is_empty() {
            self.turns.push_back(ns);
        }
        queue.push_back(r);
    }

    /// The next namespace's oldest object, if the runner has room.
    fn next(&mut self) -> Option<ObjectRef<K>> {
        if self.out.len() >= self.limit {
            return None;
        }
        let ns = self.turns.pop_front()?;
        let queue = self.waiting.get_mut(&ns)?;
        let r = queue.pop_front()?;
        if queue.is_empty() {
            self.waiting.remove(&ns);
        } else {
            self.turns.push_back(ns);
        }
        self.queued.remove(&r);
        self.out.insert(r.clone());
        Some(r)
    }
}

impl<K: Resource<DynamicType = ()>> Finished<K> {
    /// The runner reported a run of `r` (done, failed or not found). Runs kube's scheduler
    /// started on its own (a requeue) are reported too, and change nothing here.
    pub(super) fn done(&self, r: &ObjectRef<K>) {
        let mut s = self.0.lock().expect("turns poisoned");
        if !s.out.remove(r) {
            return;
        }
        if s.again.remove(r) {
            s.push(r.clone());
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
}

impl<K: Resource<DynamicType = ()>> Stream for Turns<K> {
    type Item = ObjectRef<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Every object named so far joins its queue: the triggers are never held back. They are
        // polled outside the lock, which the runner's reports (`Finished::done`) also take.
        let mut named = Vec::new();
        loop {
            match this.upstream.poll_next_unpin(cx) {
                Poll::Ready(Some(r)) => named.push(r),
                // Shutting down: what waits here never starts.
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => break,
            }
        }
        let mut s = this.state.lock().expect("turns poisoned");
        for r in named {
            s.push(r);
        }
        match s.next() {
            Some(r) => Poll::Ready(Some(r)),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

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

    fn r(ns: &str, name: &str) -> ObjectRef<crate::api::Bucket> {
        ObjectRef::new(name).within(ns)
    }

    /// What `turns` hands on now, without waiting.
    fn handed(turns: &mut Turns<crate::api::Bucket>) -> Vec<String> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut got = vec![];
        while let Poll::Ready(Some(o)) = turns.poll_next_unpin(&mut cx) {
            got.push(format!("{}/{}", o.namespace.unwrap_or_default(), o.name));
        }
        got
    }

    /// The runner is handed `limit` objects at a time, namespaces taking turns; an object named
    /// twice while it waits is handed once, and one named while the runner has it is handed
    /// again only once the runner is done with it.
    #[test]
    fn the_runner_gets_a_few_objects_at_a_time_in_turns() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (mut turns, finished) = Turns::new(rx.boxed(), 2);
        for o in [
            r("flood", "a"),
            r("flood", "b"),
            r("flood", "c"),
            r("flood", "a"),
            r("quiet", "x"),
        ] {
            tx.unbounded_send(o).unwrap();
        }
        assert_eq!(handed(&mut turns), ["flood/a", "quiet/x"]);
        // Named again while the runner has it: held back, even with room.
        tx.unbounded_send(r("flood", "a")).unwrap();
        assert!(handed(&mut turns).is_empty(), "the runner is full");
        finished.done(&r("quiet", "x"));
        assert_eq!(handed(&mut turns), ["flood/b"]);
        finished.done(&r("flood", "a"));
        assert_eq!(handed(&mut turns), ["flood/c"]);
        // A run kube's scheduler started on its own changes nothing.
        finished.done(&r("other", "z"));
        assert!(handed(&mut turns).is_empty());
        finished.done(&r("flood", "b"));
        assert_eq!(
            handed(&mut turns),
            ["flood/a"],
            "named while out, handed once done"
        );
        finished.done(&r("flood", "c"));
        finished.done(&r("flood", "a"));
        assert!(handed(&mut turns).is_empty(), "each handed once");
        // The triggers ending (shutdown) ends the stream, whatever still waits.
        tx.unbounded_send(r("late", "l")).unwrap();
        tx.unbounded_send(r("late", "m")).unwrap();
        drop(tx);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(turns.poll_next_unpin(&mut cx), Poll::Ready(None));
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
